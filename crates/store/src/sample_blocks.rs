//! A run's `tcp_info` samples, stored compactly: blocks of up to [`BLOCK_SAMPLES`]
//! samples, each one deflated BLOB (table `sample_blocks`).
//!
//! Consecutive samples of one socket differ in few fields and by little, so a block is
//! written column by column, each value as the zigzag varint of its difference from the
//! same socket's previous value, and then deflated: about 16 bytes a sample where a
//! row of 80 INTEGER columns took about 500. Every value round-trips exactly (the
//! differences wrap), and the samples come back in the order they were stored.
//!
//! Layout before deflating, every number an unsigned LEB128 varint:
//! `version, samples, tcp_info fields, then one column each of: flow, host (0 client,
//! 1 server), t_us, each tcp_info field in [`TCP_INFO_COLUMNS`] order, BBR present
//! (0/1), the BBR fields, socket memory present (0/1), its words`. A field's difference
//! is taken from the previous sample of the same flow and host that has the field; an
//! absent BBR or socket-memory group writes nothing. A block from a build that knew
//! fewer `tcp_info` fields reads the missing ones as 0, as the column a migration would
//! have added; a block with more than this build knows is refused.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;

use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::Compression;
use tcplab_record::tcpinfo::{BbrInfo, SkMemInfo, TcpInfo, SK_MEMINFO_WORDS};
use tcplab_record::{Host, SampleRecord};

use rusqlite::types::ValueRef;
use rusqlite::Transaction;

use crate::columns::{SqlInt, TCP_INFO_COLUMNS};
use crate::error::{Result, StoreError};
use crate::sqlite_err;

/// The most samples one block holds: a long run is several blocks, so no BLOB nears
/// SQLite's 1 GB limit and no block needs more than a few MB to decode.
pub(crate) const BLOCK_SAMPLES: usize = 65_536;

const VERSION: u64 = 1;

/// Stores samples of a run as blocks numbered from `first_block`, after those already
/// stored; the number of the next block.
pub(crate) fn insert(
    tx: &Transaction<'_>,
    run_id: i64,
    first_block: i64,
    samples: &[SampleRecord],
) -> rusqlite::Result<i64> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO sample_blocks (run_id, block, samples, data) VALUES (?1, ?2, ?3, ?4)",
    )?;
    let mut block = first_block;
    for chunk in samples.chunks(BLOCK_SAMPLES) {
        stmt.execute((run_id, block, chunk.len() as i64, encode(chunk)))?;
        block += 1;
    }
    Ok(block)
}

/// A run's samples in the order they were stored.
pub(crate) fn load(tx: &Transaction<'_>, path: &Path, run_id: i64) -> Result<Vec<SampleRecord>> {
    let err = || sqlite_err(path, "loading a run (samples)");
    let mut stmt = tx
        .prepare_cached("SELECT block, data FROM sample_blocks WHERE run_id = ?1 ORDER BY block")
        .map_err(err())?;
    let mut rows = stmt.query([run_id]).map_err(err())?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(err())? {
        let block: i64 = row.get(0).map_err(err())?;
        let data = row
            .get_ref(1)
            .and_then(|v| Ok(v.as_blob()?))
            .map_err(err())?;
        out.extend(decode_stored(data, path, run_id, block)?);
    }
    Ok(out)
}

/// One stored block of a run's samples; empty where the run has no such block.
pub(crate) fn load_block(
    tx: &Transaction<'_>,
    path: &Path,
    run_id: i64,
    block: i64,
) -> Result<Vec<SampleRecord>> {
    let err = || sqlite_err(path, "loading a run (samples)");
    let mut stmt = tx
        .prepare_cached("SELECT data FROM sample_blocks WHERE run_id = ?1 AND block = ?2")
        .map_err(err())?;
    let mut rows = stmt.query((run_id, block)).map_err(err())?;
    match rows.next().map_err(err())? {
        Some(row) => {
            let data = row
                .get_ref(0)
                .and_then(|v| Ok(v.as_blob()?))
                .map_err(err())?;
            decode_stored(data, path, run_id, block)
        }
        None => Ok(Vec::new()),
    }
}

/// [`decode`] of a stored block, its failure named by where the block is.
fn decode_stored(data: &[u8], path: &Path, run_id: i64, block: i64) -> Result<Vec<SampleRecord>> {
    decode(data).map_err(|e| StoreError::BadValue {
        path: path.to_owned(),
        run_id,
        what: format!("sample_blocks block {block}: {e}"),
    })
}
const BBR_FIELDS: usize = 4;

/// Encodes `samples` (at most [`BLOCK_SAMPLES`]) as one block.
pub(crate) fn encode(samples: &[SampleRecord]) -> Vec<u8> {
    encode_fields(samples, TCP_INFO_COLUMNS.len())
}

/// [`encode`] with the first `fields` tcp_info fields only, as a build that knew no more
/// wrote it.
fn encode_fields(samples: &[SampleRecord], fields: usize) -> Vec<u8> {
    let mut raw = Vec::with_capacity(samples.len() * 32);
    for v in [VERSION, samples.len() as u64, fields as u64] {
        put(&mut raw, v);
    }
    let streams = stream_indices(samples);
    for s in samples {
        put(&mut raw, u64::from(s.flow));
    }
    for s in samples {
        put(&mut raw, host_code(s.host));
    }
    let mut column = Column::new(&streams);
    column.write(&mut raw, samples.iter().map(|s| Some(s.t_us)));
    for c in &TCP_INFO_COLUMNS[..fields] {
        column.write(&mut raw, samples.iter().map(|s| Some((c.get)(&s.info))));
    }
    for s in samples {
        put(&mut raw, u64::from(s.bbr.is_some()));
    }
    for i in 0..BBR_FIELDS {
        column.write(
            &mut raw,
            samples.iter().map(|s| s.bbr.map(|b| bbr_fields(&b)[i])),
        );
    }
    for s in samples {
        put(&mut raw, u64::from(s.skmem.is_some()));
    }
    for i in 0..SK_MEMINFO_WORDS {
        column.write(
            &mut raw,
            samples
                .iter()
                .map(|s| s.skmem.map(|m| i64::from(m.words()[i]))),
        );
    }
    let mut out = DeflateEncoder::new(Vec::new(), Compression::default());
    out.write_all(&raw).expect("write to Vec");
    out.finish().expect("write to Vec")
}

/// A sample's values in the order of [`crate::columns::sample_columns`], as the
/// exported `samples` table has them: NULL for an absent BBR or socket-memory group.
pub(crate) fn values(run_id: i64, s: &SampleRecord, mut push: impl FnMut(ValueRef<'static>)) {
    push(ValueRef::Integer(run_id));
    push(ValueRef::Integer(i64::from(s.flow)));
    push(ValueRef::Text(match s.host {
        Host::Client => b"client",
        Host::Server => b"server",
    }));
    push(ValueRef::Integer(s.t_us));
    for c in TCP_INFO_COLUMNS {
        push(ValueRef::Integer((c.get)(&s.info)));
    }
    let or_null = |v: Option<i64>| v.map_or(ValueRef::Null, ValueRef::Integer);
    for i in 0..BBR_FIELDS {
        push(or_null(s.bbr.map(|b| bbr_fields(&b)[i])));
    }
    for i in 0..SK_MEMINFO_WORDS {
        push(or_null(s.skmem.map(|m| i64::from(m.words()[i]))));
    }
}

fn bbr_fields(b: &BbrInfo) -> [i64; BBR_FIELDS] {
    [
        b.bw.to_sql(),
        b.min_rtt.to_sql(),
        b.pacing_gain.to_sql(),
        b.cwnd_gain.to_sql(),
    ]
}

/// Why a block could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BlockError {
    #[error("not a deflated sample block: {0}")]
    Inflate(std::io::Error),
    #[error("sample block ends early")]
    Truncated,
    #[error(
        "sample block version {0} (this build reads version {VERSION}; a newer tcplab wrote it)"
    )]
    Version(u64),
    #[error("sample block has {found} tcp_info fields, this build knows {known} (a newer tcplab wrote it)")]
    TooManyFields { found: u64, known: usize },
    #[error("sample block: {what} {value} out of range")]
    Range { what: &'static str, value: i64 },
    #[error("sample block has {0} bytes after its last column")]
    Trailing(usize),
}

/// Decodes a block written by [`encode`] (of this or an older build).
pub(crate) fn decode(block: &[u8]) -> Result<Vec<SampleRecord>, BlockError> {
    let mut raw = Vec::new();
    DeflateDecoder::new(block)
        .read_to_end(&mut raw)
        .map_err(BlockError::Inflate)?;
    let mut r = Reader { buf: &raw, at: 0 };
    let version = r.next()?;
    if version != VERSION {
        return Err(BlockError::Version(version));
    }
    let n = usize::try_from(r.next()?).map_err(|_| BlockError::Truncated)?;
    // Each sample takes at least one byte per column: a count beyond the bytes left is
    // damage, not a reason to allocate.
    if n > raw.len() {
        return Err(BlockError::Truncated);
    }
    let fields = r.next()?;
    if fields > TCP_INFO_COLUMNS.len() as u64 {
        return Err(BlockError::TooManyFields {
            found: fields,
            known: TCP_INFO_COLUMNS.len(),
        });
    }
    let fields = fields as usize;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let flow = r.next()?;
        samples.push(SampleRecord {
            flow: u32::try_from(flow).map_err(|_| BlockError::Range {
                what: "flow",
                value: flow as i64,
            })?,
            host: Host::Client,
            t_us: 0,
            info: TcpInfo::default(),
            bbr: None,
            skmem: None,
        });
    }
    for s in &mut samples {
        s.host = match r.next()? {
            0 => Host::Client,
            1 => Host::Server,
            other => {
                return Err(BlockError::Range {
                    what: "host",
                    value: other as i64,
                })
            }
        };
    }
    let streams = stream_indices(&samples);
    let all = vec![true; n];
    let mut column = Column::new(&streams);
    for (s, t) in samples.iter_mut().zip(column.read(&mut r, &all)?) {
        s.t_us = t;
    }
    for c in &TCP_INFO_COLUMNS[..fields] {
        for (s, v) in samples.iter_mut().zip(column.read(&mut r, &all)?) {
            if !(c.set)(&mut s.info, v) {
                return Err(BlockError::Range {
                    what: c.name,
                    value: v,
                });
            }
        }
    }
    let has_bbr = r.flags(n)?;
    let mut bbr = vec![[0i64; BBR_FIELDS]; n];
    for i in 0..BBR_FIELDS {
        for (b, v) in bbr.iter_mut().zip(column.read(&mut r, &has_bbr)?) {
            b[i] = v;
        }
    }
    let narrow = |what, v: i64| u32::from_sql(v).ok_or(BlockError::Range { what, value: v });
    for ((s, &has), [bw, min_rtt, pacing_gain, cwnd_gain]) in
        samples.iter_mut().zip(&has_bbr).zip(bbr)
    {
        if has {
            s.bbr = Some(BbrInfo {
                bw: u64::from_sql(bw).expect("every i64 is a u64"),
                min_rtt: narrow("bbr_min_rtt", min_rtt)?,
                pacing_gain: narrow("bbr_pacing_gain", pacing_gain)?,
                cwnd_gain: narrow("bbr_cwnd_gain", cwnd_gain)?,
            });
        }
    }
    let has_skmem = r.flags(n)?;
    let mut words = vec![[0u32; SK_MEMINFO_WORDS]; n];
    for i in 0..SK_MEMINFO_WORDS {
        for (w, v) in words.iter_mut().zip(column.read(&mut r, &has_skmem)?) {
            w[i] = narrow("skmem word", v)?;
        }
    }
    for ((s, &has), w) in samples.iter_mut().zip(&has_skmem).zip(words) {
        if has {
            s.skmem = Some(SkMemInfo::from_words(w));
        }
    }
    if r.at != raw.len() {
        return Err(BlockError::Trailing(raw.len() - r.at));
    }
    Ok(samples)
}

fn host_code(host: Host) -> u64 {
    match host {
        Host::Client => 0,
        Host::Server => 1,
    }
}

/// Each sample's socket (flow and host) as a small index, in order of first appearance.
fn stream_indices(samples: &[SampleRecord]) -> Vec<usize> {
    let mut seen: HashMap<(u32, u64), usize> = HashMap::new();
    samples
        .iter()
        .map(|s| {
            let next = seen.len();
            *seen.entry((s.flow, host_code(s.host))).or_insert(next)
        })
        .collect()
}

/// Writes and reads columns as differences from each socket's previous value.
struct Column<'a> {
    streams: &'a [usize],
    previous: Vec<i64>,
}

impl<'a> Column<'a> {
    fn new(streams: &'a [usize]) -> Self {
        let count = streams.iter().max().map_or(0, |m| m + 1);
        Column {
            streams,
            previous: vec![0; count],
        }
    }

    /// Writes one column; `None` (an absent group's field) writes nothing.
    fn write(&mut self, out: &mut Vec<u8>, values: impl Iterator<Item = Option<i64>>) {
        self.previous.fill(0);
        for (&stream, v) in self.streams.iter().zip(values) {
            if let Some(v) = v {
                put(out, zigzag(v.wrapping_sub(self.previous[stream])));
                self.previous[stream] = v;
            }
        }
    }

    /// Reads one column: a value for each sample where `present`, 0 elsewhere.
    fn read(&mut self, r: &mut Reader<'_>, present: &[bool]) -> Result<Vec<i64>, BlockError> {
        self.previous.fill(0);
        let mut out = Vec::with_capacity(present.len());
        for (&stream, &here) in self.streams.iter().zip(present) {
            if here {
                let v = self.previous[stream].wrapping_add(unzigzag(r.next()?));
                self.previous[stream] = v;
                out.push(v);
            } else {
                out.push(0);
            }
        }
        Ok(out)
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends `v` as an unsigned LEB128 varint.
fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn next(&mut self) -> Result<u64, BlockError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.buf.get(self.at).ok_or(BlockError::Truncated)?;
            self.at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(BlockError::Truncated)
    }

    fn flags(&mut self, n: usize) -> Result<Vec<bool>, BlockError> {
        (0..n)
            .map(|_| match self.next()? {
                0 => Ok(false),
                1 => Ok(true),
                other => Err(BlockError::Range {
                    what: "presence flag",
                    value: other as i64,
                }),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(flow: u32, host: Host, t_us: i64) -> SampleRecord {
        let mut info = TcpInfo::default();
        for (i, c) in TCP_INFO_COLUMNS.iter().enumerate() {
            // Field values of every width, growing with time, some at their extremes.
            let v = match i % 5 {
                0 => t_us.wrapping_mul(1000).wrapping_add(i as i64),
                1 => i64::from(u8::MAX) & t_us.wrapping_add(i as i64),
                2 => -1,
                3 => 0,
                _ => 1,
            };
            if !(c.set)(&mut info, v) {
                assert!((c.set)(&mut info, 1), "{}", c.name);
            }
        }
        SampleRecord {
            flow,
            host,
            t_us,
            info,
            bbr: (flow.is_multiple_of(2) && t_us % 3 != 0).then_some(BbrInfo {
                bw: u64::MAX - t_us as u64,
                min_rtt: 20_000,
                pacing_gain: 739,
                cwnd_gain: 512,
            }),
            skmem: (t_us % 4 != 1).then(|| SkMemInfo::from_words([t_us as u32; SK_MEMINFO_WORDS])),
        }
    }

    fn interleaved(n: i64) -> Vec<SampleRecord> {
        (0..n)
            .map(|i| {
                let host = if i % 2 == 0 {
                    Host::Client
                } else {
                    Host::Server
                };
                sample((i / 2 % 3) as u32, host, i * 10 - 5)
            })
            .collect()
    }

    #[test]
    fn samples_round_trip_exactly_in_their_order() {
        for n in [0, 1, 2, 7, 1000] {
            let samples = interleaved(n);
            assert_eq!(decode(&encode(&samples)).unwrap(), samples, "{n} samples");
        }
    }

    #[test]
    fn extreme_values_round_trip() {
        let mut a = sample(u32::MAX, Host::Server, i64::MIN);
        let mut b = sample(u32::MAX, Host::Server, i64::MAX);
        for c in TCP_INFO_COLUMNS {
            (c.set)(&mut a.info, 0);
            if !(c.set)(&mut b.info, i64::MAX) && !(c.set)(&mut b.info, i64::from(u32::MAX)) {
                assert!((c.set)(&mut b.info, 1), "{}", c.name);
            }
        }
        let samples = vec![a, b.clone(), b];
        assert_eq!(decode(&encode(&samples)).unwrap(), samples);
    }

    #[test]
    fn a_sample_costs_few_bytes() {
        let samples = interleaved(10_000);
        let per_sample = encode(&samples).len() as f64 / samples.len() as f64;
        assert!(per_sample < 40.0, "{per_sample:.1} bytes per sample");
    }

    #[test]
    fn an_older_block_reads_missing_fields_as_zero_and_a_newer_one_is_refused() {
        let samples = interleaved(3);
        let mut raw = inflate(&encode(&samples));
        // Rewrite the field count: one fewer than this build knows, then one more.
        let count_at = 2;
        let known = TCP_INFO_COLUMNS.len() as u8;
        assert_eq!(raw[count_at], known, "the count fits one byte");
        raw[count_at] = known + 1;
        assert!(matches!(
            decode(&deflate(&raw)),
            Err(BlockError::TooManyFields { .. })
        ));
        // An older block: the last field's column removed.
        let fewer = encode_fields(&samples, TCP_INFO_COLUMNS.len() - 1);
        let back = decode(&fewer).unwrap();
        let last = TCP_INFO_COLUMNS.last().unwrap();
        for (old, new) in samples.iter().zip(&back) {
            assert_eq!((last.get)(&new.info), 0);
            let mut expected = old.info;
            (last.set)(&mut expected, 0);
            assert_eq!(new.info, expected);
        }
    }

    #[test]
    fn exported_values_follow_the_columns() {
        let s = sample(2, Host::Server, 6);
        let mut row = Vec::new();
        values(9, &s, |v| row.push(v));
        let names: Vec<&str> = crate::columns::sample_columns().collect();
        assert_eq!(row.len(), names.len());
        let at = |name| row[names.iter().position(|n| *n == name).unwrap()];
        assert_eq!(at("run_id"), ValueRef::Integer(9));
        assert_eq!(
            at("host"),
            ValueRef::Text(crate::rows::enum_name(&Host::Server).as_bytes())
        );
        assert_eq!(at("t_us"), ValueRef::Integer(6));
        assert_eq!(at("rtt"), ValueRef::Integer(i64::from(s.info.rtt)));
        assert_eq!(
            at("bbr_bw"),
            ValueRef::Null,
            "flow 2 at t 6 has no BBR fields"
        );
        assert_eq!(
            at("skmem_drops"),
            ValueRef::Integer(i64::from(s.skmem.unwrap().drops))
        );
    }

    #[test]
    fn damaged_blocks_are_errors_not_panics() {
        let block = encode(&interleaved(50));
        assert!(decode(&block[..block.len() / 2]).is_err());
        assert!(decode(b"not deflate at all").is_err());
        let mut raw = inflate(&block);
        raw.push(0);
        assert!(matches!(
            decode(&deflate(&raw)),
            Err(BlockError::Trailing(1))
        ));
        raw.truncate(raw.len() - 2);
        assert!(decode(&deflate(&raw)).is_err());
        assert!(matches!(
            decode(&deflate(&[9, 0, 0])),
            Err(BlockError::Version(9))
        ));
    }

    fn inflate(block: &[u8]) -> Vec<u8> {
        let mut raw = Vec::new();
        DeflateDecoder::new(block).read_to_end(&mut raw).unwrap();
        raw
    }

    fn deflate(raw: &[u8]) -> Vec<u8> {
        let mut out = DeflateEncoder::new(Vec::new(), Compression::default());
        out.write_all(raw).unwrap();
        out.finish().unwrap()
    }
}
