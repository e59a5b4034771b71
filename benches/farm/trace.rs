//! Build traces: one line per translation unit of a real build, as the
//! recorder wrote it (`record`), and large projects drawn from them.
//!
//! The format is text, one header line and one unit per line:
//!
//! ```text
//! # ccroute-farm trace 1 | liblzma (crate lzma-sys 0.1.20) | gcc 12.2.0 -O2 | make -j2
//! seq  unit  pp_bytes  pp_wire  obj_bytes  obj_wire  cpu_us  after
//! 0    src/liblzma/common/alone_decoder.c  61234  13012  5120  2300  81000  -
//! ```
//!
//! `seq` is the order make issued the compile in; `pp_*` and `obj_*` are
//! the preprocessed text's and the object's sizes raw and as ccroute's wire
//! compresses them; `cpu_us` is the compile's user + system time; `after`
//! lists the units (by seq, comma-separated) that must finish before it
//! starts, `-` for none.

use std::fmt::Write as _;
use std::path::Path;

/// One recorded translation unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    pub seq: u32,
    pub name: String,
    pub pp_bytes: u64,
    pub pp_wire: u64,
    pub obj_bytes: u64,
    pub obj_wire: u64,
    pub cpu_us: u64,
    pub after: Vec<u32>,
}

/// A build: its description (the header's fields) and its units by seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub name: String,
    pub about: String,
    pub units: Vec<Unit>,
}

const HEADER: &str = "# ccroute-farm trace 1";
const COLUMNS: &str = "seq\tunit\tpp_bytes\tpp_wire\tobj_bytes\tobj_wire\tcpu_us\tafter";

impl Trace {
    /// Reads a trace file; its name is the file's stem.
    pub fn load(path: &Path) -> Result<Trace, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read trace {}: {e}", path.display()))?;
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("trace").to_owned();
        Trace::parse(&name, &text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses a trace's text.
    pub fn parse(name: &str, text: &str) -> Result<Trace, String> {
        let mut lines = text.lines();
        let head = lines.next().ok_or("empty trace")?;
        let about = head.strip_prefix(HEADER).ok_or("not a ccroute-farm trace (first line)")?;
        let about = about.trim_start_matches([' ', '|']).trim().to_owned();
        if lines.next().map(str::trim) != Some(COLUMNS) {
            return Err(format!("second line must be the columns: {COLUMNS}"));
        }
        let mut units = Vec::new();
        for (i, line) in lines.enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split('\t').collect();
            let bad = |what: &str| format!("line {}: {what}", i + 3);
            if f.len() != 8 {
                return Err(bad("expected 8 tab-separated fields"));
            }
            let num = |s: &str| s.parse::<u64>().map_err(|_| bad(&format!("{s:?} is not a number")));
            let seq = u32::try_from(num(f[0])?).map_err(|_| bad("seq too large"))?;
            if seq as usize != units.len() {
                return Err(bad("seq must count from 0 in order"));
            }
            let after = if f[7] == "-" {
                Vec::new()
            } else {
                f[7].split(',').map(|s| s.parse::<u32>().map_err(|_| bad("bad after"))).collect::<Result<_, _>>()?
            };
            if after.iter().any(|&a| a >= seq) {
                return Err(bad("a unit may only wait for earlier units"));
            }
            let unit = Unit {
                seq,
                name: f[1].to_owned(),
                pp_bytes: num(f[2])?,
                pp_wire: num(f[3])?,
                obj_bytes: num(f[4])?,
                obj_wire: num(f[5])?,
                cpu_us: num(f[6])?,
                after,
            };
            if unit.pp_wire > unit.pp_bytes || unit.obj_wire > unit.obj_bytes {
                return Err(bad("a wire size exceeds its raw size"));
            }
            units.push(unit);
        }
        if units.is_empty() {
            return Err("no units".into());
        }
        Ok(Trace { name: name.to_owned(), about, units })
    }

    /// The trace's text.
    pub fn render(&self) -> String {
        let mut out = format!("{HEADER} | {}\n{COLUMNS}\n", self.about);
        for u in &self.units {
            let after = if u.after.is_empty() {
                "-".to_owned()
            } else {
                u.after.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            };
            let _ = writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                u.seq, u.name, u.pp_bytes, u.pp_wire, u.obj_bytes, u.obj_wire, u.cpu_us, after
            );
        }
        out
    }

    /// Total recorded compile time, microseconds.
    pub fn work_us(&self) -> u64 {
        self.units.iter().map(|u| u.cpu_us).sum()
    }

    /// The longest chain of waits, microseconds (the longest unit when none wait).
    pub fn critical_path_us(&self) -> u64 {
        let mut finish = vec![0u64; self.units.len()];
        for u in &self.units {
            let start = u.after.iter().map(|&a| finish[a as usize]).max().unwrap_or(0);
            finish[u.seq as usize] = start + u.cpu_us;
        }
        finish.into_iter().max().unwrap_or(0)
    }

    /// The same build in the order a build tool that weighs its critical
    /// path by recorded times would start it (ninja 1.12's own scheduler
    /// weighs every step 1, i.e. by depth; weights from its log's times are
    /// a proposal some projects build into their own ninja): the unit with
    /// the longest chain still ahead of it (its own time and its
    /// dependants') first, ties in the recorded order. Every unit still
    /// comes after the units it waits for.
    pub fn in_critical_path_order(&self) -> Trace {
        let n = self.units.len();
        let mut ahead = vec![0u64; n];
        // Dependants have higher seqs: walk from the last.
        for u in self.units.iter().rev() {
            ahead[u.seq as usize] += u.cpu_us;
            for &a in &u.after {
                ahead[a as usize] = ahead[a as usize].max(ahead[u.seq as usize]);
            }
        }
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by_key(|&s| std::cmp::Reverse(ahead[s as usize]));
        // A unit of no time ties with its dependants: keep it first.
        let mut placed = vec![false; n];
        let mut sorted = Vec::with_capacity(n);
        let mut pending: std::collections::VecDeque<u32> = order.into();
        while let Some(s) = pending.pop_front() {
            if self.units[s as usize].after.iter().all(|&a| placed[a as usize]) {
                placed[s as usize] = true;
                sorted.push(s);
            } else {
                pending.push_back(s);
            }
        }
        let mut new_seq = vec![0u32; n];
        for (i, &s) in sorted.iter().enumerate() {
            new_seq[s as usize] = i as u32;
        }
        let units = sorted
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let u = &self.units[s as usize];
                Unit { seq: i as u32, after: u.after.iter().map(|&a| new_seq[a as usize]).collect(), ..u.clone() }
            })
            .collect();
        Trace { name: self.name.clone(), about: format!("{}, in critical-path order", self.about), units }
    }

    /// The build's makespan, microseconds, when it is driven as the replay
    /// drives it (`make -jN`: the ready units in their order, a new one
    /// submitted as soon as one of the N in flight is answered, its
    /// dependants ready when it is) and each unit is placed at once, with no
    /// latency, on the token of `speeds` (one entry per token) that would
    /// finish it first, waiting for a busy faster token when that finishes
    /// sooner. On a link of `link_bps` (farm bits per second; 0: unshaped)
    /// the texts go up it one after another in the order submitted, a unit
    /// starting once its text is across, and the objects come down it one
    /// after another in the order compiled, a unit answered once its object
    /// is across.
    ///
    /// Not a lower bound: a placement that knew the units still to come
    /// could do better on unequal hosts, and a sender that knew them could
    /// put a long unit's text on the link first. But on equal hosts with N
    /// no more than the tokens, every unit starts when its text is across
    /// whatever the placement, so this is what the build's own order allows;
    /// the gap between it and the lower bound is the order's, not the
    /// scheduler's.
    pub fn in_order_makespan_us(&self, jobs: usize, speeds: &[f64], link_bps: u64) -> f64 {
        use std::cmp::Reverse;
        use std::collections::{BinaryHeap, VecDeque};
        if speeds.is_empty() {
            return f64::INFINITY;
        }
        let wire_ns = |bytes: u64| match link_bps {
            0 => 0,
            r => (u128::from(bytes) * 8 * 1_000_000_000 / u128::from(r)) as u64,
        };
        // Times as integer nanoseconds, for a total order in the heaps.
        let mut free_at = vec![0u64; speeds.len()];
        let mut waiting_on: Vec<usize> = self.units.iter().map(|u| u.after.len()).collect();
        let mut dependants: Vec<Vec<u32>> = vec![Vec::new(); self.units.len()];
        for u in &self.units {
            for &a in &u.after {
                dependants[a as usize].push(u.seq);
            }
        }
        let mut ready: VecDeque<u32> = self.units.iter().filter(|u| u.after.is_empty()).map(|u| u.seq).collect();
        // Events: (time, answered?, seq): a unit compiled, then answered.
        let mut events: BinaryHeap<Reverse<(u64, bool, u32)>> = BinaryHeap::new();
        let (mut now, mut end, mut in_flight, mut up_free, mut down_free) = (0u64, 0u64, 0usize, 0u64, 0u64);
        loop {
            while in_flight < jobs.max(1) {
                let Some(seq) = ready.pop_front() else { break };
                let unit = &self.units[seq as usize];
                up_free = up_free.max(now) + wire_ns(unit.pp_wire);
                let cost_ns = unit.cpu_us as f64 * 1000.0;
                let finish = |t: usize| free_at[t].max(up_free) + (cost_ns / speeds[t].max(1e-9)).round() as u64;
                let best = (0..speeds.len()).min_by_key(|&t| (finish(t), free_at[t])).unwrap_or(0);
                let done = finish(best);
                free_at[best] = done;
                events.push(Reverse((done, false, seq)));
                in_flight += 1;
            }
            let Some(Reverse((at, answered, seq))) = events.pop() else { break };
            now = at;
            if !answered {
                down_free = down_free.max(at) + wire_ns(self.units[seq as usize].obj_wire);
                events.push(Reverse((down_free, true, seq)));
                continue;
            }
            in_flight -= 1;
            end = end.max(at);
            for &d in &dependants[seq as usize] {
                waiting_on[d as usize] -= 1;
                if waiting_on[d as usize] == 0 {
                    ready.push_back(d);
                }
            }
        }
        end as f64 / 1000.0
    }

    /// A project of `n` units drawn from the units of `from` (uniformly over
    /// all their units, with replacement, by a fixed seed), in random order,
    /// without dependencies: a large build whose units are distributed as
    /// the recorded ones are.
    pub fn generate(n: usize, from: &[Trace], seed: u64) -> Trace {
        let pool: Vec<&Unit> = from.iter().flat_map(|t| &t.units).collect();
        let mut rng = Rng(seed.max(1));
        let units = (0..n)
            .map(|i| {
                let u = pool[(rng.next() % pool.len() as u64) as usize];
                Unit { seq: i as u32, name: format!("gen/{i:05}/{}", u.name), after: Vec::new(), ..u.clone() }
            })
            .collect();
        let names: Vec<&str> = from.iter().map(|t| t.name.as_str()).collect();
        Trace {
            name: format!("generated-{n}"),
            about: format!(
                "{n} units drawn with replacement from the recorded units of {} (seed {seed})",
                names.join(", ")
            ),
            units,
        }
    }
}

/// xorshift64*: the generator's draws, the same on every machine.
#[derive(Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(dead_code)] // used by the tests, which only the test harness build runs
    fn unit(seq: u32, cpu_us: u64, after: Vec<u32>) -> Unit {
        Unit { seq, name: format!("u{seq}.c"), pp_bytes: 10, pp_wire: 5, obj_bytes: 8, obj_wire: 4, cpu_us, after }
    }

    #[test]
    fn round_trips_and_computes_bounds() {
        let t = Trace {
            name: "t".into(),
            about: "a test".into(),
            units: vec![unit(0, 5, vec![]), unit(1, 7, vec![]), unit(2, 3, vec![0, 1])],
        };
        let back = Trace::parse("t", &t.render()).expect("parses");
        assert_eq!(back, t);
        assert_eq!(t.work_us(), 15);
        assert_eq!(t.critical_path_us(), 10);
        let g = Trace::generate(1000, std::slice::from_ref(&t), 7);
        assert_eq!(g.units.len(), 1000);
        assert!(g.units.iter().all(|u| [5, 7, 3].contains(&u.cpu_us) && u.after.is_empty()));
        assert_eq!(g, Trace::generate(1000, &[t], 7), "the same seed draws the same project");
    }

    #[test]
    fn in_order_makespan_follows_the_builds_order() {
        // Two tokens, make -j2: the long unit submitted last ends the build
        // at 1 + 10, though the lower bound (the longest unit) is 10.
        let late = Trace {
            name: "t".into(),
            about: "a test".into(),
            units: vec![unit(0, 1, vec![]), unit(1, 1, vec![]), unit(2, 10, vec![])],
        };
        assert_eq!(late.in_order_makespan_us(2, &[1.0, 1.0], 0), 11.0);
        // The same units, the long one first: 10.
        let early = Trace { units: vec![unit(0, 10, vec![]), unit(1, 1, vec![]), unit(2, 1, vec![])], ..late.clone() };
        assert_eq!(early.in_order_makespan_us(2, &[1.0, 1.0], 0), 10.0);
        // A dependency waits for its unit: 5 then 3.
        let chain = Trace { units: vec![unit(0, 5, vec![]), unit(1, 3, vec![0])], ..late.clone() };
        assert_eq!(chain.in_order_makespan_us(4, &[1.0; 4], 0), 8.0);
        // A slow free token loses to a fast one that frees sooner: the
        // second unit waits 4 for the fast token (4 + 4) rather than take
        // 4 / 0.25 = 16 on the slow one.
        let two = Trace { units: vec![unit(0, 4, vec![]), unit(1, 4, vec![])], ..late.clone() };
        assert_eq!(two.in_order_makespan_us(2, &[1.0, 0.25], 0), 8.0);
        // On a link of one byte a microsecond (texts 5 bytes, objects 4):
        // the long unit's text goes up third, at 10 + 5, once the first
        // unit's object is down (6 + 4); it ends at 25 and is down at 29.
        assert_eq!(late.in_order_makespan_us(2, &[1.0, 1.0], 8_000_000), 29.0);
        // Long first: its text is up at 5 and it is down at 19; the third
        // text goes up once the second unit is answered (11 + 4), so the
        // last object is down at 15 + 5 + 1 + 4.
        assert_eq!(early.in_order_makespan_us(2, &[1.0, 1.0], 8_000_000), 25.0);
    }

    #[test]
    fn critical_path_order_puts_the_longest_chain_first_after_what_it_waits_for() {
        // 0 (1) <- 2 (9); 1 (5); 3 (0) <- 4 (2): chains ahead 10, 5, 9, 2, 2.
        let t = Trace {
            name: "t".into(),
            about: "a test".into(),
            units: vec![
                unit(0, 1, vec![]),
                unit(1, 5, vec![]),
                unit(2, 9, vec![0]),
                unit(3, 0, vec![]),
                unit(4, 2, vec![3]),
            ],
        };
        let o = t.in_critical_path_order();
        let names: Vec<&str> = o.units.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["u0.c", "u2.c", "u1.c", "u3.c", "u4.c"]);
        assert_eq!(o.units[1].after, vec![0]);
        assert_eq!(o.units[4].after, vec![3]);
        assert!(o.units.iter().enumerate().all(|(i, u)| u.seq == i as u32));
        assert_eq!((o.work_us(), o.critical_path_us()), (t.work_us(), t.critical_path_us()));
        // Two tokens: the long chain ends at 10, the rest beside it.
        assert_eq!(o.in_order_makespan_us(2, &[1.0, 1.0], 0), 10.0);
    }

    #[test]
    fn refuses_what_is_not_a_trace() {
        assert!(Trace::parse("x", "").is_err());
        assert!(Trace::parse("x", "# ccroute-farm trace 1 | x\nseq\n").is_err());
        let forward = format!("{HEADER} | x\n{COLUMNS}\n0\ta.c\t1\t1\t1\t1\t1\t1\n");
        assert!(Trace::parse("x", &forward).unwrap_err().contains("earlier"));
        let wide = format!("{HEADER} | x\n{COLUMNS}\n0\ta.c\t1\t2\t1\t1\t1\t-\n");
        assert!(Trace::parse("x", &wide).is_err());
    }
}
