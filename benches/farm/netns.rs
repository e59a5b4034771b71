//! The farm's network: a hub namespace with a bridge (the scheduler's host),
//! and a namespace per host joined to it by a veth pair, each end's egress
//! shaped with `tbf`; loss and partitions with nftables in the host's
//! namespace. Every name carries the run's tag (`ccfarm<pid>`), so that a
//! run removes what it made and the next run removes what a killed one left.

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// The prefix of every namespace the harness makes.
pub const PREFIX: &str = "ccfarm";
/// The hub's address on the bridge.
pub const HUB_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 1);

/// Runs a command, its failure an error naming it and its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Feeds `script` to `program -batch -` (ip and tc) or `-f -` (nft).
fn batch(program: &str, args: &[&str], script: &str) -> Result<(), String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes()).map_err(|e| format!("{program}: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// Root, and `ip`, `tc` and `nft` (installed from Debian's iproute2 and
/// nftables when missing and apt-get is there).
pub fn check_tools() -> Result<(), String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(2).map(str::to_owned));
    if uid.as_deref() != Some("0") {
        return Err("the farm harness makes network namespaces: run it as root".into());
    }
    let missing: Vec<&str> = [("ip", "iproute2"), ("tc", "iproute2"), ("nft", "nftables")]
        .into_iter()
        .filter(|(cmd, _)| !on_path(cmd))
        .map(|(_, pkg)| pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut pkgs = missing.clone();
    pkgs.dedup();
    if !on_path("apt-get") {
        return Err(format!("missing {}; install them (Debian: apt-get install {})", pkgs.join(" "), pkgs.join(" ")));
    }
    eprintln!("farm: installing {}", pkgs.join(" "));
    run("apt-get", &["update", "-qq"])?;
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend(pkgs.iter().copied());
    let out = Command::new("apt-get")
        .args(&args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|e| format!("apt-get: {e}"))?;
    if !out.status.success() || ["ip", "tc", "nft"].iter().any(|c| !on_path(c)) {
        return Err(format!("could not install {}: {}", pkgs.join(" "), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

/// A link's shape: rate both ways (bits per second; 0: unshaped).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub rate_bps: u64,
}

/// The farm's namespaces.
#[derive(Debug)]
pub struct Net {
    pub tag: String,
    pub hub: String,
    pub hosts: Vec<String>,
}

/// The address of host `i` (from 0).
pub fn host_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 88, 1 + (i / 250) as u8, 1 + (i % 250) as u8)
}

impl Net {
    /// Removes what earlier runs left whose harness is gone, then makes the
    /// hub namespace with its bridge.
    pub fn new() -> Result<Net, String> {
        remove_stale();
        let tag = format!("{PREFIX}{}", std::process::id());
        let hub = format!("{tag}-hub");
        let net = Net { tag, hub: hub.clone(), hosts: Vec::new() };
        run("ip", &["netns", "add", &hub])?;
        let script = format!(
            "link set lo up\n\
             link add br0 type bridge\n\
             addr add {HUB_IP}/16 dev br0\n\
             link set br0 up\n"
        );
        batch("ip", &["-n", &hub, "-batch", "-"], &script)?;
        Ok(net)
    }

    /// Adds `count` hosts, each shaped by `shape(i)`.
    pub fn add_hosts(&mut self, count: usize, shape: impl Fn(usize) -> Shape) -> Result<(), String> {
        let (mut ip_script, mut hub_script, mut tc_lines) = (String::new(), String::new(), Vec::new());
        let hub = self.hub.clone();
        let first = self.hosts.len();
        let mut per_host = Vec::new();
        for i in first..first + count {
            let ns = format!("{}-h{i}", self.tag);
            let (a, b) = (format!("fa{i}"), format!("fb{i}"));
            ip_script
                .push_str(&format!("netns add {ns}\nlink add {a} netns {ns} type veth peer name {b} netns {hub}\n"));
            per_host.push((
                ns.clone(),
                format!(
                    "link set {a} name eth0\naddr add {}/16 dev eth0\nlink set eth0 up\nlink set lo up\n",
                    host_ip(i)
                ),
            ));
            hub_script.push_str(&format!("link set {b} master br0\nlink set {b} up\n"));
            let s = shape(i);
            if s.rate_bps > 0 {
                // A burst of 10 ms at the rate (and at least 64 KiB, beyond a
                // GSO batch), queued at most 50 ms.
                let burst = (s.rate_bps / 8 / 100).max(64 << 10);
                for (n, dev) in [(ns.clone(), "eth0".to_owned()), (hub.clone(), b.clone())] {
                    tc_lines.push(format!(
                        "-n {n} qdisc add dev {dev} root tbf rate {}bit burst {burst} latency 50ms",
                        s.rate_bps
                    ));
                }
            }
            self.hosts.push(ns);
        }
        batch("ip", &["-batch", "-"], &ip_script)?;
        for (ns, script) in &per_host {
            batch("ip", &["-n", ns, "-batch", "-"], script)?;
        }
        batch("ip", &["-n", &hub, "-batch", "-"], &hub_script)?;
        for line in &tc_lines {
            let args: Vec<&str> = line.split_whitespace().collect();
            run("tc", &args)?;
        }
        Ok(())
    }

    /// Drops `permille`/1000 of the host's packets each way (0 removes the rule).
    pub fn set_loss(&self, host: usize, permille: u32) -> Result<(), String> {
        set_loss_in(&self.hosts[host], permille)
    }

    /// [`Net::set_loss`] for the hub: every link at once, and the scheduler
    /// with them.
    pub fn set_hub_loss(&self, permille: u32) -> Result<(), String> {
        set_loss_in(&self.hub, permille)
    }
}

/// Drops `permille`/1000 of the UDP packets in and out of namespace `ns`
/// (1000: all of them, a partition; 0 removes the rule).
fn set_loss_in(ns: &str, permille: u32) -> Result<(), String> {
    let _ = run("ip", &["netns", "exec", ns, "nft", "delete", "table", "inet", "farm"]);
    if permille == 0 {
        return Ok(());
    }
    let rule = if permille >= 1000 { "drop".to_owned() } else { format!("numgen random mod 1000 < {permille} drop") };
    let script = format!(
        "table inet farm {{\n\
               chain in {{ type filter hook input priority 0; meta l4proto udp {rule}; }}\n\
               chain out {{ type filter hook output priority 0; meta l4proto udp {rule}; }}\n\
             }}\n"
    );
    batch("ip", &["netns", "exec", ns, "nft", "-f", "-"], &script)
}

impl Net {
    /// Packets the farm's queueing disciplines (every link's `tbf`, both
    /// ends) have dropped so far: a link's queue overflowed.
    pub fn link_drops(&self) -> Result<u64, String> {
        let mut total = 0;
        for ns in std::iter::once(&self.hub).chain(&self.hosts) {
            total += qdisc_drops(&run("tc", &["-n", ns, "-s", "qdisc", "show"])?);
        }
        Ok(total)
    }

    /// UDP datagrams the farm's sockets had no room for (`RcvbufErrors` of
    /// `/proc/net/snmp`, summed over the namespaces): a receiver did not
    /// read fast enough and its socket's buffer was full.
    /// The hub's (the scheduler and the relay), then the hosts' together.
    pub fn socket_drops(&self) -> Result<(u64, u64), String> {
        let read = |ns: &str| run("ip", &["netns", "exec", ns, "cat", "/proc/net/snmp"]).map(|s| udp_rcvbuf_errors(&s));
        let hub = read(&self.hub)?;
        let mut hosts = 0;
        for ns in &self.hosts {
            hosts += read(ns)?;
        }
        Ok((hub, hosts))
    }

    /// Kills every process in the farm's namespaces and removes them.
    pub fn remove(&self) {
        remove_tagged(&self.tag);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The farm's namespaces now, by name.
pub fn listed() -> Vec<String> {
    run("ip", &["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(PREFIX))
        .map(str::to_owned)
        .collect()
}

/// Removes this process's namespaces (and every process in them).
pub fn remove_own() {
    remove_tagged(&format!("{PREFIX}{}", std::process::id()));
}

fn remove_tagged(tag: &str) {
    let mine: Vec<String> = listed().into_iter().filter(|n| n.starts_with(&format!("{tag}-"))).collect();
    for ns in &mine {
        if let Ok(pids) = run("ip", &["netns", "pids", ns]) {
            for pid in pids.split_whitespace() {
                let _ = run("kill", &["-9", pid]);
            }
        }
    }
    let script: String = mine.iter().map(|ns| format!("netns del {ns}\n")).collect();
    if !script.is_empty() {
        // -force: go on past a namespace already gone.
        let _ = batch("ip", &["-force", "-batch", "-"], &script);
    }
}

/// Removes what runs whose harness no longer runs left behind.
fn remove_stale() {
    let mut tags: Vec<String> = listed().into_iter().filter_map(|n| n.split('-').next().map(str::to_owned)).collect();
    tags.sort();
    tags.dedup();
    for tag in tags {
        let alive = tag
            .strip_prefix(PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|pid| pid != std::process::id() && std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            eprintln!("farm: removing namespaces a stopped run left ({tag}-*)");
            remove_tagged(&tag);
        }
    }
}

/// The packets dropped in `tc -s qdisc show`'s output, summed over its
/// queueing disciplines (each has a line `Sent B bytes P pkt (dropped D, ...`).
pub fn qdisc_drops(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once("(dropped ")?.1.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u64>().ok())
        .sum()
}

/// `RcvbufErrors` of the `Udp:` lines of `/proc/net/snmp` (a line of
/// names, then one of values); 0 when absent.
pub fn udp_rcvbuf_errors(snmp: &str) -> u64 {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else { return 0 };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[allow(unused_imports)] // used by the tests, which only the test harness build runs
    use super::*;

    #[test]
    fn drops_are_summed_over_every_queueing_discipline() {
        let shown = "qdisc noqueue 0: dev lo root refcnt 2 \n \
             Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n \
             backlog 0b 0p requeues 0\n\
             qdisc tbf 8001: dev fb3 root refcnt 2 rate 250Mbit burst 312500b lat 50ms \n \
             Sent 73381202 bytes 52104 pkt (dropped 17, overlimits 3110 requeues 0) \n \
             backlog 0b 0p requeues 0\n\
             qdisc tbf 8002: dev fb4 root refcnt 2 rate 250Mbit burst 312500b lat 50ms \n \
             Sent 1200 bytes 9 pkt (dropped 1205, overlimits 0 requeues 0) \n";
        assert_eq!(qdisc_drops(shown), 1222);
        assert_eq!(qdisc_drops(""), 0);
    }

    #[test]
    fn receive_buffer_errors_are_read_from_the_udp_lines() {
        let snmp = "Tcp: RtoAlgorithm InErrs\nTcp: 1 5\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    Udp: 3037626 3805 142665 3188700 142660 0\n\
                    UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    UdpLite: 0 0 0 0 7 0\n";
        assert_eq!(udp_rcvbuf_errors(snmp), 142_660);
        assert_eq!(udp_rcvbuf_errors("Tcp: A\nTcp: 1\n"), 0);
    }
}
