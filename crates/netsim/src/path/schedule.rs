//! Paths that change during a test: `at T CLAUSE…`, `at T1-T2 CLAUSE…` and `every P`,
//! written after the path's own clauses (`rtt 20ms rate 50mbit at 10s rate 10mbit at 20s
//! rate 50mbit`). An `at` holds the clauses up to the next `at`; its time counts from
//! the test's start. A span's settings last until its end, when the ones before it come
//! back; `every P` repeats the `at`s every P, each period starting from the path's own
//! clauses. `rate 0` in an `at` is an outage: nothing leaves, the queue keeps what fits.
//!
//! The parser resolves the schedule into [`Step`]s: both directions' whole settings from
//! each time on, so that a link follows one [`Timeline`] and printing gives back each
//! step's differences from the one before (a span as its two ends).

use super::{
    apply, check_each_key_once, clause, direction_settings, duration_within, fmt_duration, Aqm,
    Bottleneck, Clause, Cursor, Direction, Key, LinkSpec, Pace, PathError, PathSpec, QueueLimit,
    Scope, DURATION,
};

/// The latest time an `at` may name, and the longest period: a day.
const MAX_SCHEDULE_HOURS: u64 = 24;

/// How a path changes during the test.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedule {
    /// In time order, each at its own time.
    pub steps: Vec<Step>,
    /// `every`: the steps repeat with this period, µs, each period starting from the
    /// path's own settings.
    pub every_us: Option<u64>,
}

/// Both directions' settings from a time on.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// µs after the test's start (within the period, with `every`).
    pub at_us: u64,
    pub up: LinkSpec,
    pub down: LinkSpec,
}

impl Step {
    pub fn link(&self, dir: Direction) -> &LinkSpec {
        match dir {
            Direction::Up => &self.up,
            Direction::Down => &self.down,
        }
    }
}

impl Schedule {
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// One direction's settings over time, `base` from the start.
    pub fn timeline(&self, base: &LinkSpec, dir: Direction) -> Timeline {
        let mut changes: Vec<(u64, LinkSpec)> = Vec::new();
        for step in &self.steps {
            let previous = changes.last().map_or(base, |(_, spec)| spec);
            if step.link(dir) != previous {
                changes.push((step.at_us, step.link(dir).clone()));
            }
        }
        Timeline {
            base: base.clone(),
            changes,
            period_us: self.every_us,
        }
    }

    /// Refuses a schedule that changes nothing within a test of `test_us`: its last
    /// change (or its period) comes at or after the test's end.
    pub fn check_within(&self, test_us: u64) -> Result<(), PathError> {
        let (word, at) = match (self.every_us, self.steps.last()) {
            (Some(period), _) => ("every", period),
            (None, Some(step)) => ("at", step.at_us),
            (None, None) => return Ok(()),
        };
        if at < test_us {
            return Ok(());
        }
        Err(PathError::whole(format!(
            "{word} {} is beyond the test's {}: a change comes before the test ends",
            fmt_duration(at),
            fmt_duration(test_us)
        )))
    }

    /// Each step as printed after `at`: its time and what differs from the settings
    /// before it (`10s rate 10mbit`).
    pub fn changes(&self, path: &PathSpec) -> Vec<String> {
        let mut before = (&path.up, &path.down);
        self.steps
            .iter()
            .map(|step| {
                let words = differences(before, (&step.up, &step.down));
                before = (&step.up, &step.down);
                format!("{} {}", fmt_duration(step.at_us), words.join(" "))
            })
            .collect()
    }
}

/// One direction's settings over the test, as its link follows them.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    base: LinkSpec,
    /// (µs after the start, within the period if any; the settings from then on), in
    /// time order.
    changes: Vec<(u64, LinkSpec)>,
    period_us: Option<u64>,
}

impl Timeline {
    pub fn is_fixed(&self) -> bool {
        self.changes.is_empty()
    }

    /// The settings from the start.
    pub fn base(&self) -> &LinkSpec {
        &self.base
    }

    /// Every setting it passes through, the base first.
    pub fn specs(&self) -> impl Iterator<Item = &LinkSpec> {
        std::iter::once(&self.base).chain(self.changes.iter().map(|(_, spec)| spec))
    }

    /// The same times with each setting turned into another (a pacer's own link).
    pub fn map(&self, f: impl Fn(&LinkSpec) -> LinkSpec) -> Timeline {
        Timeline {
            base: f(&self.base),
            changes: self
                .changes
                .iter()
                .map(|(at, spec)| (*at, f(spec)))
                .collect(),
            period_us: self.period_us,
        }
    }

    /// The settings in force `t_us` after the start, and when (µs after the start) the
    /// next change comes, if one does.
    pub fn at(&self, t_us: u64) -> (&LinkSpec, Option<u64>) {
        let (period_start, within) = match self.period_us {
            Some(p) => (t_us - t_us % p, t_us % p),
            None => (0, t_us),
        };
        let i = self.changes.partition_point(|(at, _)| *at <= within);
        let now = if i == 0 {
            &self.base
        } else {
            &self.changes[i - 1].1
        };
        let next = match (self.changes.get(i), self.period_us) {
            (Some((at, _)), _) => Some(period_start + at),
            (None, Some(p)) if !self.changes.is_empty() => Some(period_start + p),
            (None, _) => None,
        };
        (now, next)
    }
}

/// The words that begin the schedule.
pub(super) fn begins(t: &super::Token) -> bool {
    matches!(t.text.as_str(), "at" | "every")
}

/// The keys an `at` may change. Matched whole: a new key does not compile until it
/// says whether it can change during a test.
fn changeable(key: Key) -> bool {
    match key {
        Key::Delay
        | Key::Rtt
        | Key::Jitter
        | Key::Loss
        | Key::Duplicate
        | Key::Corrupt
        | Key::Reorder
        | Key::Rate
        | Key::Queue
        | Key::Aqm
        | Key::Police
        | Key::Pace => true,
        // A trace is its setting's own schedule; the hosts' queue, the MTU and the seed
        // are set when the lab is built.
        Key::Trace | Key::DelayTrace | Key::LossTrace | Key::TxQueueLen | Key::Mtu | Key::Seed => {
            false
        }
    }
}

/// An `at` and what it changes.
struct Group<'a> {
    /// Its time, as written.
    time: &'a super::Token,
    from_us: u64,
    /// The end of a span.
    until_us: Option<u64>,
    clauses: Vec<Clause<'a>>,
}

/// Reads the schedule: `every` and `at` groups up to the end of `cur`.
pub(super) fn parse(cur: &mut Cursor<'_>, base: &PathSpec) -> Result<Schedule, PathError> {
    let mut every: Option<(u64, &super::Token)> = None;
    let mut groups: Vec<Group<'_>> = Vec::new();
    while let Some(word) = cur.bump() {
        match word.text.as_str() {
            "every" => {
                if every.is_some() {
                    return Err(word.error("every given twice; a schedule has one period"));
                }
                if !groups.is_empty() {
                    return Err(word.error("every comes before the at clauses it repeats"));
                }
                let t = cur.value(DURATION)?;
                match time(t)? {
                    0 => return Err(t.error("a period must be above zero")),
                    p => every = Some((p, t)),
                }
            }
            "at" => {
                let t = cur.value("a time such as 10s, or a span such as 5s-7s")?;
                let (from_us, until_us) = span(t)?;
                if let Some(last) = groups.last() {
                    if from_us < last.from_us {
                        return Err(t.error(format!(
                            "at {} comes after at {}; write the changes in time order",
                            t.text, last.time.text
                        )));
                    }
                    if from_us == last.from_us {
                        return Err(t.error(format!(
                            "at {} twice; put the clauses of one time together",
                            t.text
                        )));
                    }
                }
                if let Some((period, p)) = every {
                    if from_us >= period || until_us.is_some_and(|u| u > period) {
                        return Err(t.error(format!(
                            "not within the period of every {}; a repeated change comes before the period ends",
                            p.text
                        )));
                    }
                }
                let mut clauses = Vec::new();
                while cur.peek().is_some_and(|t| !begins(t)) {
                    let c = clause(cur, true)?;
                    if let Some(why) = unchangeable(&c, base) {
                        return Err(c.at.error(why));
                    }
                    clauses.push(c);
                }
                if clauses.is_empty() {
                    return Err(t.error(
                        "nothing changes at this time; clauses such as rate 10mbit follow it",
                    ));
                }
                check_each_key_once(&clauses)?;
                groups.push(Group {
                    time: t,
                    from_us,
                    until_us,
                    clauses,
                });
            }
            _ => {
                return Err(word.error(
                    "expected at: the path's own clauses come before its schedule, and every before its at clauses",
                ))
            }
        }
    }
    if let (Some((_, p)), true) = (every, groups.is_empty()) {
        return Err(p.error("every needs at least one at to repeat"));
    }
    resolve(base, &groups, every.map(|(period, _)| period))
}

/// A time after the test's start: with a unit, at most a day.
fn time(t: &super::Token) -> Result<u64, PathError> {
    duration_within(t, MAX_SCHEDULE_HOURS)
}

/// `10s`, or a span `5s-7s` (its end after its start).
fn span(t: &super::Token) -> Result<(u64, Option<u64>), PathError> {
    let Some((from, until)) = t.text.split_once('-') else {
        return Ok((time(t)?, None));
    };
    let part = |text: &str| super::Token {
        text: text.to_owned(),
        ..t.clone()
    };
    let (from_us, until_us) = (time(&part(from))?, time(&part(until))?);
    if until_us <= from_us {
        return Err(t.error("a span ends after it starts, as in 5s-7s"));
    }
    Ok((from_us, Some(until_us)))
}

/// Why this clause of an `at` cannot change the path, if it cannot.
fn unchangeable(c: &Clause<'_>, base: &PathSpec) -> Option<String> {
    if !changeable(c.key) {
        let keys: Vec<_> = Key::ALL
            .into_iter()
            .filter(|&k| changeable(k))
            .map(Key::name)
            .collect();
        return Some(format!(
            "{} cannot change during a test; at changes {}",
            c.key.name(),
            keys.join(", ")
        ));
    }
    for dir in [Direction::Up, Direction::Down]
        .into_iter()
        .filter(|&d| c.scope.covers(d))
    {
        let link = base.link(dir);
        let why = match (&c.setting, c.key) {
            (_, Key::Rate) if !matches!(link.bottleneck, Bottleneck::Rate { .. }) => format!(
                "a rate can change only where the path has one; give {}rate before the first at",
                prefix(c.scope, dir)
            ),
            (super::Setting::Aqm(aqm), _) if aqm.name() != link.aqm.name() => format!(
                "an aqm keeps its kind during a test ({} here), only its parameters change",
                link.aqm.name()
            ),
            (
                super::Setting::Aqm(Aqm::FqCodel { flows, .. }),
                _,
            ) if matches!(link.aqm, Aqm::FqCodel { flows: f, .. } if f != *flows) => {
                "fq_codel keeps its number of flows during a test".to_owned()
            }
            (super::Setting::Police(_), _) if link.police.is_none() => format!(
                "a policer can change only where the path has one; give {}police before the first at",
                prefix(c.scope, dir)
            ),
            (super::Setting::Pace(Pace::Window(_)), _) => {
                "a pacer following the windows cannot be set during a test; at changes a pacer's rate".to_owned()
            }
            (super::Setting::Pace(_), _) if !matches!(link.pace, Some(Pace::Rate(_))) => format!(
                "a pacing rate can change only where the path has one; give {}pace before the first at",
                prefix(c.scope, dir)
            ),
            _ => continue,
        };
        return Some(why);
    }
    None
}

/// How a clause of `scope` names `dir`: without a prefix if it covers both.
fn prefix(scope: Scope, dir: Direction) -> &'static str {
    match (scope, dir) {
        (Scope::Both, _) => "",
        (_, Direction::Up) => Scope::Up.prefix(),
        (_, Direction::Down) => Scope::Down.prefix(),
    }
}

/// Delay and rtt both set a direction's delay.
fn same_setting(a: Key, b: Key) -> bool {
    let delay = |k| matches!(k, Key::Delay | Key::Rtt);
    a == b || (delay(a) && delay(b))
}

fn overlap(a: Scope, b: Scope) -> bool {
    a == Scope::Both || b == Scope::Both || a == b
}

/// The setting of `key` in `from`, copied into `to` (a span's end).
fn restore(key: Key, from: &LinkSpec, to: &mut LinkSpec) {
    match key {
        Key::Delay | Key::Rtt => to.delay_us = from.delay_us,
        Key::Jitter => to.jitter = from.jitter,
        Key::Loss => to.loss = from.loss,
        Key::Duplicate => to.duplicate = from.duplicate,
        Key::Corrupt => to.corrupt = from.corrupt,
        Key::Reorder => to.reorder = from.reorder,
        Key::Rate => to.bottleneck = from.bottleneck.clone(),
        Key::Queue => to.queue = from.queue,
        Key::Aqm => to.aqm = from.aqm,
        Key::Police => to.police = from.police,
        Key::Pace => to.pace = from.pace,
        Key::Trace | Key::DelayTrace | Key::LossTrace | Key::TxQueueLen | Key::Mtu | Key::Seed => {
            unreachable!("{} does not change", key.name())
        }
    }
}

/// The groups in time order as whole settings from each time on.
fn resolve(
    base: &PathSpec,
    groups: &[Group<'_>],
    every_us: Option<u64>,
) -> Result<Schedule, PathError> {
    // (time, whether it starts, group): at one time, spans end before others start.
    let mut events: Vec<(u64, bool, usize)> = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        events.push((g.from_us, true, i));
        if let Some(until) = g.until_us {
            events.push((until, false, i));
        }
    }
    events.sort_unstable();
    let (mut up, mut down) = (base.up.clone(), base.down.clone());
    let mut saved: Vec<Option<(LinkSpec, LinkSpec)>> = vec![None; groups.len()];
    let mut steps: Vec<Step> = Vec::new();
    let mut k = 0;
    while k < events.len() {
        let t = events[k].0;
        let mut last = events[k].2;
        while let Some(&(_, starts, i)) = events.get(k).filter(|e| e.0 == t) {
            let g = &groups[i];
            last = i;
            if starts {
                for c in &g.clauses {
                    let open = (0..groups.len()).filter(|&o| saved[o].is_some());
                    for o in open {
                        if groups[o]
                            .clauses
                            .iter()
                            .any(|oc| same_setting(oc.key, c.key) && overlap(oc.scope, c.scope))
                        {
                            return Err(c.at.error(format!(
                                "{} is changed by the span at {} already",
                                c.key.name(),
                                groups[o].time.text
                            )));
                        }
                    }
                }
                if g.until_us.is_some() {
                    saved[i] = Some((up.clone(), down.clone()));
                }
                for c in &g.clauses {
                    if c.scope.covers(Direction::Up) {
                        apply(&mut up, Direction::Up, &c.setting);
                    }
                    if c.scope.covers(Direction::Down) {
                        apply(&mut down, Direction::Down, &c.setting);
                    }
                }
            } else {
                let (before_up, before_down) = saved[i].take().expect("a span ends once");
                for c in &g.clauses {
                    if c.scope.covers(Direction::Up) {
                        restore(c.key, &before_up, &mut up);
                    }
                    if c.scope.covers(Direction::Down) {
                        restore(c.key, &before_down, &mut down);
                    }
                }
            }
            k += 1;
        }
        for (dir, link) in [(Direction::Up, &up), (Direction::Down, &down)] {
            if let Some((_, message)) = link.problem() {
                return Err(groups[last]
                    .time
                    .error(format!("{message} ({}, at this time)", dir.name())));
            }
        }
        let before = steps
            .last()
            .map_or((&base.up, &base.down), |s| (&s.up, &s.down));
        if (&up, &down) != before {
            steps.push(Step {
                at_us: t,
                up: up.clone(),
                down: down.clone(),
            });
        }
    }
    Ok(Schedule { steps, every_us })
}

/// The clauses that turn the settings `before` into `after`, both directions.
fn differences(before: (&LinkSpec, &LinkSpec), after: (&LinkSpec, &LinkSpec)) -> Vec<String> {
    let mut words = Vec::new();
    let delays = |(u, d): (&LinkSpec, &LinkSpec)| (u.delay_us, d.delay_us);
    let ((was_up, was_down), (up, down)) = (delays(before), delays(after));
    if (was_up, was_down) != (up, down) {
        if up == down {
            words.push(format!("rtt {}", fmt_duration(up * 2)));
        } else {
            for (scope, was, now) in [(Scope::Up, was_up, up), (Scope::Down, was_down, down)] {
                if was != now {
                    words.push(format!("{}delay {}", scope.prefix(), fmt_duration(now)));
                }
            }
        }
    }
    let (was_up, was_down) = (direction_settings(before.0), direction_settings(before.1));
    let (up, down) = (direction_settings(after.0), direction_settings(after.1));
    for k in 0..up.len() {
        let up_changed = was_up[k] != up[k];
        let down_changed = was_down[k] != down[k];
        let written = |was: &Option<(Key, String)>, now: &Option<(Key, String)>| match now {
            Some((key, value)) => format!("{} {value}", key.name()),
            None => {
                let key = was.as_ref().expect("a changed setting was set before").0;
                format!("{} {}", key.name(), default_value(key))
            }
        };
        if up_changed && down_changed && up[k] == down[k] {
            words.push(written(&was_up[k], &up[k]));
            continue;
        }
        for (scope, changed, was, now) in [
            (Scope::Up, up_changed, &was_up[k], &up[k]),
            (Scope::Down, down_changed, &was_down[k], &down[k]),
        ] {
            if changed {
                words.push(format!("{}{}", scope.prefix(), written(was, now)));
            }
        }
    }
    words
}

/// How a step writes a setting going back to its default.
fn default_value(key: Key) -> String {
    match key {
        Key::Delay | Key::Rtt | Key::Jitter => fmt_duration(0),
        Key::Loss | Key::Duplicate | Key::Corrupt | Key::Reorder => "0%".to_owned(),
        Key::Queue => QueueLimit::default().to_string(),
        // A schedule keeps a rate, an aqm's kind, a policer and a pacer (`unchangeable`).
        Key::Rate
        | Key::Aqm
        | Key::Police
        | Key::Pace
        | Key::Trace
        | Key::DelayTrace
        | Key::LossTrace
        | Key::TxQueueLen
        | Key::Mtu
        | Key::Seed => {
            unreachable!("{} keeps a value during a test", key.name())
        }
    }
}

/// The grammar's lines for the schedule, after the keys'.
pub(super) const GRAMMAR: &str = "\
schedule (after the clauses above; times count from the test's start):
  at T CLAUSE…                             from T on: delay, rtt, jitter, loss,
                                           duplicate, corrupt, reorder, rate,
                                           queue, aqm (its parameters), police,
                                           pace (a rate)
  at T1-T2 CLAUSE…                         from T1 to T2, then the settings before
  every P                                  the at clauses repeat every P (their
                                           times within it), each period from the
                                           clauses above
  rate 0 in an at is an outage: nothing leaves, the queue keeps what fits
";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> PathSpec {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn err(s: &str) -> String {
        s.parse::<PathSpec>().unwrap_err().to_string()
    }

    fn rate(l: &LinkSpec) -> u64 {
        match l.bottleneck {
            Bottleneck::Rate { bps, .. } => bps,
            _ => panic!("no rate"),
        }
    }

    #[test]
    fn steps_hold_the_whole_settings_from_their_time_on() {
        let p =
            parse("rtt 20ms loss 1% rate 50mbit at 10s rate 10mbit at 20s up.loss 0% rate 50mbit");
        let steps = &p.schedule.steps;
        assert_eq!(steps.len(), 2);
        assert_eq!(
            (steps[0].at_us, rate(&steps[0].up), rate(&steps[0].down)),
            (10_000_000, 10_000_000, 10_000_000)
        );
        assert_eq!(
            steps[0].up.loss, p.up.loss,
            "a step keeps what it does not set"
        );
        assert_eq!(rate(&steps[1].up), 50_000_000);
        assert_eq!(steps[1].up.loss, super::super::Loss::None);
        assert_eq!(steps[1].down.loss, p.down.loss);
        assert_eq!(
            p.to_string(),
            "rtt 20ms loss 1% rate 50mbit at 10s rate 10mbit at 20s up.loss 0% rate 50mbit"
        );
    }

    #[test]
    fn a_span_ends_with_the_settings_before_it_and_prints_as_two_steps() {
        let p = parse("rtt 20ms rate 50mbit at 5s-7s rate 0 at 6s rtt 100ms");
        let at: Vec<_> = p
            .schedule
            .steps
            .iter()
            .map(|s| (s.at_us / 1000, rate(&s.up), s.up.delay_us))
            .collect();
        assert_eq!(
            at,
            [
                (5000, 0, 10_000),
                (6000, 0, 50_000),
                (7000, 50_000_000, 50_000)
            ]
        );
        let text = p.to_string();
        assert_eq!(
            text,
            "rtt 20ms rate 50mbit at 5s rate 0 at 6s rtt 100ms at 7s rate 50mbit"
        );
        assert_eq!(parse(&text), p);
    }

    #[test]
    fn a_timeline_says_what_holds_and_when_it_changes_next() {
        let p = parse("rtt 20ms rate 50mbit every 4s at 1s-2s rate 0");
        let t = p.timeline(Direction::Up);
        let at = |us| {
            let (spec, next) = t.at(us);
            (rate(spec), next)
        };
        assert_eq!(at(0), (50_000_000, Some(1_000_000)));
        assert_eq!(at(999_999), (50_000_000, Some(1_000_000)));
        assert_eq!(at(1_000_000), (0, Some(2_000_000)));
        assert_eq!(at(2_000_000), (50_000_000, Some(4_000_000)));
        assert_eq!(at(4_000_000), (50_000_000, Some(5_000_000)));
        assert_eq!(at(5_500_000), (0, Some(6_000_000)));
        let fixed = parse("rtt 20ms rate 50mbit").timeline(Direction::Up);
        assert!(fixed.is_fixed());
        assert_eq!(fixed.at(7).1, None);
        // A direction the schedule leaves alone has no changes.
        assert!(parse("rate 50mbit at 1s up.rate 10mbit")
            .timeline(Direction::Down)
            .is_fixed());
    }

    #[test]
    fn bad_schedules_are_refused_naming_the_clause() {
        for (spec, expected) in [
            ("rate 50mbit at 20s rate 10mbit at 10s rate 5mbit", "at '10s' (word 8): at 10s comes after at 20s; write the changes in time order"),
            ("rate 50mbit at 1s rate 1mbit at 1s loss 1%", "at 1s twice"),
            ("rate 50mbit at 1s", "nothing changes at this time"),
            ("rate 50mbit at 1s mtu 9000", "mtu cannot change during a test; at changes delay, rtt, jitter, loss, duplicate, corrupt, reorder, rate, queue, aqm, police, pace"),
            ("rtt 20ms at 1s rate 10mbit", "a rate can change only where the path has one; give rate before the first at"),
            ("rate 1mbit aqm codel at 1s aqm pie", "an aqm keeps its kind during a test (codel here)"),
            ("rate 1mbit at 2s-1s rate 0", "a span ends after it starts"),
            ("rate 1mbit at 1s-3s rate 0 at 2s rate 5mbit", "at 'rate' (word 9): rate is changed by the span at 1s-3s already"),
            ("rate 1mbit every 4s at 5s rate 0", "not within the period of every 4s"),
            ("rate 1mbit every 4s", "every needs at least one at"),
            ("rate 1mbit every 4s rate 2mbit", "expected at"),
            ("rate 1mbit at 1s rate 0 every 4s", "every comes before the at clauses"),
            ("rate 0", "rate 0, an outage, is for at"),
            ("rate 1mbit at 1s rate 2mbit rate 3mbit", "rate set twice"),
            ("rate 1mbit at 25h rate 2mbit", "too long; at most 24h"),
        ] {
            let e = err(spec);
            assert!(e.contains(expected), "{spec}: {e}");
        }
    }

    #[test]
    fn a_schedule_beyond_the_test_is_refused() {
        let p = parse("rate 1mbit at 10s rate 2mbit at 20s-25s rate 0");
        assert!(p.schedule.check_within(25_000_001).is_ok());
        let e = p.schedule.check_within(20_000_000).unwrap_err().to_string();
        assert_eq!(
            e,
            "path spec: at 25s is beyond the test's 20s: a change comes before the test ends"
        );
        let e = parse("rate 1mbit every 40s at 1s rate 2mbit")
            .schedule
            .check_within(30_000_000);
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("every 40s is beyond the test's 30s"));
        assert!(Schedule::default().check_within(0).is_ok());
    }

    #[test]
    fn the_toml_form_carries_the_schedule() {
        #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
        struct Experiment {
            path: PathSpec,
        }
        let p = parse("rtt 20ms rate 50mbit every 10s at 5s-6s up.loss 1% rate 0");
        let text = toml::to_string(&Experiment { path: p.clone() }).unwrap();
        assert!(text.contains(r#"every = "10s""#), "{text}");
        assert!(
            text.contains(r#"at = ["5s up.loss 1% rate 0", "6s up.loss 0% rate 50mbit"]"#),
            "{text}"
        );
        let back: Experiment = toml::from_str(&text).unwrap();
        assert_eq!(back.path, p);
        let one: Experiment =
            toml::from_str("[path]\nrate = \"1mbit\"\nat = \"1s rate 2mbit\"\n").unwrap();
        assert_eq!(one.path.schedule.steps.len(), 1);
    }
}
