//! Packets the emulator reads from its TUN devices (virtio-net header + IP): parsed,
//! classified (the test's or tcplab's own), segmented and coalesced or refused, never a
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcplab_netsim::packet::{Coalescer, CsumMode, PacketInfo, Segmenter, VirtioNetHdr};
use tcplab_netsim::traffic::Classifier;

fuzz_target!(|data: &[u8]| {
    let Ok((hdr, ip)) = VirtioNetHdr::split(data) else {
        return;
    };
    let _ = PacketInfo::parse(ip);
    let _ = Classifier {
        control_port: Some(5201),
    }
    .classify_ip(ip);
    let Ok(segments) = Segmenter::new(&hdr, ip) else {
        return;
    };
    let mut out = vec![0u8; 65_536 + VirtioNetHdr::LEN];
    let mut coalescer = Coalescer::new();
    for i in 0..segments.len().min(64) {
        if let Ok(len) = segments.write_segment(i, CsumMode::Partial, true, &mut out) {
            coalescer.push(&out[..len]);
        }
    }
});
