//! One colour per series name: a name keeps its colour in every chart that draws it
//! (of a report section, or of a `tcplab plot`, which builds the same section); a
//! packet's fate in the link one colour in every chart.

use tcplab_netsim::capture::Fate;
use tcplab_netsim::link::DropReason;

/// An RGB colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    /// `#rrggbb`.
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// Tableau 10: distinct hues that stay apart for colour-blind readers and in print.
pub const COLORS: [Rgb; 10] = [
    Rgb(0x4e, 0x79, 0xa7),
    Rgb(0xf2, 0x8e, 0x2b),
    Rgb(0xe1, 0x57, 0x59),
    Rgb(0x76, 0xb7, 0xb2),
    Rgb(0x59, 0xa1, 0x4f),
    Rgb(0xed, 0xc9, 0x48),
    Rgb(0xb0, 0x7a, 0xa1),
    Rgb(0xff, 0x9d, 0xa7),
    Rgb(0x9c, 0x75, 0x5f),
    Rgb(0xba, 0xb0, 0xac),
];

/// The colour of the sum over flows and of bounds.
pub const TOTAL: Rgb = Rgb(0x22, 0x22, 0x22);

/// The name of the series summing every flow.
pub const ALL_FLOWS: &str = "all flows";

/// The legend entry that explains every series' dashed bound.
pub const BOUND: &str = "bound (dashed)";

/// The time-sequence graph's segments and lines, the same in every run and apart from
/// each other and from every fate's colour.
pub const SENT: Rgb = COLORS[0];
pub const RETRANSMITTED: Rgb = COLORS[1];
pub const ACKED: Rgb = COLORS[4];
pub const RECEIVE_WINDOW: Rgb = COLORS[6];
pub const CWND_EDGE: Rgb = Rgb(0x49, 0x98, 0x94);
/// A topology's hosts and routers.
pub const HOST: Rgb = COLORS[0];
pub const ROUTER: Rgb = TOTAL;

/// One colour per fate of a packet in the link, in every chart that marks it (from
/// Tableau 10 and, past its ten, Tableau 20's darker hues).
pub fn fate(fate: Fate) -> Rgb {
    match fate {
        Fate::Delivered => COLORS[9],
        Fate::Reordered => COLORS[7],
        Fate::Corrupted => COLORS[8],
        Fate::Duplicate => COLORS[3],
        Fate::MarkedCe => COLORS[5],
        Fate::Dropped(DropReason::Loss) => COLORS[2],
        Fate::Dropped(DropReason::Queue) => Rgb(0x79, 0x70, 0x6e),
        Fate::Dropped(DropReason::Aqm) => Rgb(0xb6, 0x99, 0x2d),
        Fate::Dropped(DropReason::Oversize) => Rgb(0xd3, 0x72, 0x95),
        Fate::Dropped(DropReason::Police) => Rgb(0x9c, 0x3d, 0x54),
    }
}

/// Series whose names mean the same in every run keep one colour everywhere, whatever
/// else a chart or a section draws.
const FIXED: [(&str, Rgb); 9] = [
    (ALL_FLOWS, TOTAL),
    (BOUND, TOTAL),
    ("rwnd", COLORS[2]),
    ("sndbuf", COLORS[6]),
    ("cwnd", COLORS[0]),
    ("pacing", COLORS[4]),
    ("app", COLORS[9]),
    ("bottleneck up", COLORS[8]),
    ("bottleneck down", COLORS[3]),
];

/// Hands out colours in the order names are first asked for.
#[derive(Clone, Debug, Default)]
pub struct Palette {
    names: Vec<String>,
}

impl Palette {
    pub fn new() -> Palette {
        Palette::default()
    }

    /// The colour of `name`: the same on every call; fixed for the names every run
    /// has (the sum over flows, the limits, the bottleneck queues).
    pub fn color(&mut self, name: &str) -> Rgb {
        if let Some((_, color)) = FIXED.iter().find(|(n, _)| *n == name) {
            return *color;
        }
        if let Some(f) = Fate::from_label(name) {
            return fate(f);
        }
        let index = match self.names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                self.names.push(name.to_owned());
                self.names.len() - 1
            }
        };
        COLORS[index % COLORS.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_keeps_its_colour_and_names_get_distinct_ones() {
        let mut p = Palette::new();
        let a = p.color("nodelay=true");
        let b = p.color("nodelay=false");
        assert_ne!(a, b);
        assert_eq!(p.color("nodelay=true"), a);
        assert_eq!((a, b), (COLORS[0], COLORS[1]));
        assert_eq!(p.color(ALL_FLOWS), TOTAL);
        assert_eq!(p.color("rwnd"), Palette::new().color("rwnd"));
        let distinct: std::collections::HashSet<Rgb> =
            (0..10).map(|i| p.color(&format!("s{i}"))).collect();
        assert_eq!(distinct.len(), 10);
        assert_eq!(Rgb(0x4e, 0x79, 0xa7).hex(), "#4e79a7");
    }

    /// Each fate has its own colour, by its label too, apart from the segments and
    /// lines of the time-sequence graph it is drawn on.
    #[test]
    fn every_fate_has_a_colour_of_its_own() {
        let mut p = Palette::new();
        let fates: Vec<Rgb> = Fate::ALL.iter().map(|&f| fate(f)).collect();
        let mut all: Vec<Rgb> = fates.clone();
        all.extend([SENT, RETRANSMITTED, ACKED, RECEIVE_WINDOW, CWND_EDGE]);
        let distinct: std::collections::HashSet<Rgb> = all.iter().copied().collect();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
        for f in Fate::ALL {
            assert_eq!(p.color(f.label()), fate(f), "{}", f.label());
        }
    }
}
