//! What `apply` needs to know about a NIC's queues, read once through a [`Backend`]: its
//! receive and transmit queues with their RPS, RFS and XPS settings, its NUMA node and local
//! CPUs, and the interrupts of its queues with their affinity. Also the CPU-set formats the
//! kernel speaks (`rps_cpus`' hex words, `smp_affinity_list`'s ranges) and the evidence that
//! says a NIC is worth tuning (the kernel's scaling.rst; the sgcWebSockets guide: tune the NIC only when the
//! kernel spends real time in softirq).

use crate::catalog::eval::{Finding, Status};
use crate::catalog::{Catalog, SoftirqField, SoftnetField, Source};
use crate::host::Backend;
use crate::value::Value;

/// One receive queue (`queues/rx-N`).
#[derive(Debug, Clone, PartialEq)]
pub struct RxQueue {
    pub index: u32,
    /// `rps_cpus` as the kernel prints it; None when unreadable (a kernel without RPS).
    pub rps_cpus: Option<String>,
    pub rps_flow_cnt: Option<String>,
}

/// One transmit queue (`queues/tx-N`).
#[derive(Debug, Clone, PartialEq)]
pub struct TxQueue {
    pub index: u32,
    pub xps_cpus: Option<String>,
}

/// One interrupt of the NIC's queues.
#[derive(Debug, Clone, PartialEq)]
pub struct Irq {
    pub number: u32,
    /// Its name in /proc/interrupts (`eth0-TxRx-3`): what a boot script finds it by, since
    /// the numbers change when the driver loads again.
    pub name: String,
    /// `/proc/irq/N/smp_affinity_list` now.
    pub affinity: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NicFacts {
    pub name: String,
    /// The MAC address a udev rule matches it by (names change at boot; the address not).
    pub address: Option<String>,
    pub physical: bool,
    pub rx: Vec<RxQueue>,
    pub tx: Vec<TxQueue>,
    /// Online CPUs of the host.
    pub cpus: Vec<u32>,
    /// CPUs of the NIC's NUMA node (`device/local_cpulist`); every CPU without one.
    pub local_cpus: Vec<u32>,
    /// One CPU per physical core of `local_cpus` (the first thread of each core), in order:
    /// what [`rss_queues`] counts and the CPUs a queue is given first.
    pub cores: Vec<u32>,
    pub numa_node: Option<i64>,
    pub irqs: Vec<Irq>,
    /// Its channel counts (ethtool netlink); None where they cannot be read (a captured tree,
    /// a driver without channels).
    pub channels: Option<crate::host::Channels>,
    /// The receive ring (now, maximum), ethtool netlink; None where it cannot be read.
    pub rx_ring: Option<(u32, u32)>,
    /// systemd's default link policy (99-default.link's [Link] lines): a .link file that
    /// matches the NIC replaces it, so wstune's carries them on.
    pub default_link: Option<String>,
    /// The PCI address of its device (`PCI_SLOT_NAME` in device/uevent, `0000:3b:00.0`): what
    /// a .link file for other hosts of the same hardware matches a physical NIC by (udev's
    /// ID_PATH), since its name there may be one udev gave it.
    pub pci_slot: Option<String>,
}

/// The host's online CPUs and the NIC's local ones (`device/local_cpulist`, online only;
/// every online CPU where the device names none). None when the online CPUs cannot be read.
pub fn local_cpus(backend: &dyn Backend, name: &str) -> Option<(Vec<u32>, Vec<u32>)> {
    let text = |p: &str| backend.read(p).ok().map(|t| t.trim().to_string());
    let cpus = text("/sys/devices/system/cpu/online").and_then(|t| parse_cpu_list(&t))?;
    let local = text(&format!("/sys/class/net/{name}/device/local_cpulist"))
        .and_then(|t| parse_cpu_list(&t))
        .map(|l| {
            l.into_iter()
                .filter(|c| cpus.contains(c))
                .collect::<Vec<_>>()
        })
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| cpus.clone());
    Some((cpus, local))
}

/// One CPU per physical core of `cpus`, in their order: hardware threads of one core (its
/// `topology/thread_siblings_list`, else the same `physical_package_id` and `core_id`) count
/// once, by their first CPU in `cpus`. A CPU whose topology cannot be read is its own core.
pub fn physical_cores(backend: &dyn Backend, cpus: &[u32]) -> Vec<u32> {
    let text = |cpu: u32, f: &str| {
        backend
            .read(&format!("/sys/devices/system/cpu/cpu{cpu}/topology/{f}"))
            .ok()
            .map(|t| t.trim().to_string())
    };
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for &cpu in cpus {
        let core = text(cpu, "thread_siblings_list")
            .and_then(|t| parse_cpu_list(&t))
            .filter(|l| l.contains(&cpu))
            .map(|l| format!("siblings {}", cpu_list(&l)))
            .or_else(|| {
                let package = text(cpu, "physical_package_id")?;
                let core = text(cpu, "core_id")?;
                Some(format!("package {package} core {core}"))
            })
            .unwrap_or_else(|| format!("cpu {cpu}"));
        if !seen.contains(&core) {
            seen.push(core);
            out.push(cpu);
        }
    }
    out
}

/// How many receive queues a NIC is given: one per physical core of its NUMA node, at most
/// the hardware's maximum (where its channel counts can be read). The kernel's scaling.rst,
/// "RSS Configuration" and its "Suggested Configuration": "A typical RSS configuration would
/// be to have one receive queue for each CPU if the device supports enough queues, or
/// otherwise at least one for each memory domain"; "For interrupt handling, HT has shown no
/// benefit in initial tests, so limit the number of queues to the number of CPU cores in the
/// system". It is a ceiling, not a goal: "The most efficient high-rate configuration is likely
/// the one with the smallest number of receive queues where no receive queue overflows due to
/// a saturated CPU", so `apply` raises a NIC's queues to it only on evidence (softnet drops or
/// squeezes, a CPU busy in softirq) or when told to, and never past it.
pub fn rss_queues(cores: usize, channels: Option<crate::host::Channels>) -> u32 {
    let cores = cores.max(1) as u32;
    let max = channels.map_or(0, |ch| {
        if ch.max_combined > 0 {
            ch.max_combined
        } else {
            ch.max_rx
        }
    });
    if max > 0 {
        cores.min(max)
    } else {
        cores
    }
}

/// The per-NIC variables a check's target may use (`nic.physical_cores`, `nic.rss_queues`:
/// [`crate::catalog::NIC_VARS`]); empty when the host's CPUs cannot be read.
pub fn nic_vars(backend: &dyn Backend, name: &str) -> std::collections::BTreeMap<String, Value> {
    let mut out = std::collections::BTreeMap::new();
    if let Some((_, local)) = local_cpus(backend, name) {
        let cores = physical_cores(backend, &local).len();
        out.insert("nic.physical_cores".into(), Value::Num(cores as i64));
        out.insert(
            "nic.rss_queues".into(),
            Value::Num(rss_queues(cores, backend.channels(name).ok()) as i64),
        );
    }
    out
}

/// Read one link's queue facts.
pub fn read(backend: &dyn Backend, name: &str, physical: bool) -> NicFacts {
    let base = format!("/sys/class/net/{name}");
    let text = |p: &str| backend.read(p).ok().map(|t| t.trim().to_string());
    let (cpus, local_cpus) = local_cpus(backend, name).unwrap_or_else(|| (vec![0], vec![0]));
    let cores = physical_cores(backend, &local_cpus);
    let queues = backend.list(&format!("{base}/queues")).unwrap_or_default();
    let index = |q: &str, prefix: &str| q.strip_prefix(prefix).and_then(|n| n.parse::<u32>().ok());
    let mut rx: Vec<RxQueue> = queues
        .iter()
        .filter_map(|q| index(q, "rx-"))
        .map(|i| RxQueue {
            index: i,
            rps_cpus: text(&format!("{base}/queues/rx-{i}/rps_cpus")),
            rps_flow_cnt: text(&format!("{base}/queues/rx-{i}/rps_flow_cnt")),
        })
        .collect();
    rx.sort_by_key(|q| q.index);
    let mut tx: Vec<TxQueue> = queues
        .iter()
        .filter_map(|q| index(q, "tx-"))
        .map(|i| TxQueue {
            index: i,
            xps_cpus: text(&format!("{base}/queues/tx-{i}/xps_cpus")),
        })
        .collect();
    tx.sort_by_key(|q| q.index);
    let irqs = queue_irqs(backend, name)
        .into_iter()
        .map(|(number, irq_name)| Irq {
            number,
            name: irq_name,
            affinity: text(&format!("/proc/irq/{number}/smp_affinity_list")),
        })
        .collect();
    NicFacts {
        name: name.to_string(),
        address: text(&format!("{base}/address")).filter(|a| !a.is_empty()),
        physical,
        rx,
        tx,
        local_cpus,
        cores,
        cpus,
        numa_node: text(&format!("{base}/device/numa_node")).and_then(|t| t.parse().ok()),
        irqs,
        channels: backend.channels(name).ok(),
        rx_ring: backend.rx_ring(name).ok(),
        default_link: [
            "/usr/lib/systemd/network/99-default.link",
            "/lib/systemd/network/99-default.link",
        ]
        .iter()
        .find_map(|p| backend.read(p).ok()),
        pci_slot: crate::host::fs::pci_slot(backend, name),
    }
}

/// The interrupts of a NIC's queues, in queue order: the /proc/interrupts lines whose name
/// starts with the NIC's (`eth0-TxRx-0`, `eth0-rx-1`: how most drivers name their queues),
/// else those of the device's own MSI vectors (`device/msi_irqs`) named like a queue
/// (mlx5's `mlx5_comp0@pci:...`, virtio's `virtio1-input.0`), leaving out its control and
/// asynchronous-event vectors.
fn queue_irqs(backend: &dyn Backend, nic: &str) -> Vec<(u32, String)> {
    let Ok(text) = backend.read("/proc/interrupts") else {
        return vec![];
    };
    let lines: Vec<(u32, String)> = text
        .lines()
        .filter_map(|l| {
            let (num, rest) = l.trim_start().split_once(':')?;
            let number = num.trim().parse::<u32>().ok()?;
            Some((number, rest.split_whitespace().last()?.to_string()))
        })
        .collect();
    let prefix = format!("{nic}-");
    let named: Vec<(u32, String)> = lines
        .iter()
        .filter(|(_, n)| n.starts_with(&prefix))
        .cloned()
        .collect();
    if !named.is_empty() {
        return named;
    }
    let msi: Vec<u32> = backend
        .list(&format!("/sys/class/net/{nic}/device/msi_irqs"))
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    let queue_like = |n: &str| {
        let n = n.to_ascii_lowercase();
        ["comp", "txrx", "rx", "tx", "input", "output", "queue"]
            .iter()
            .any(|w| n.contains(w))
            && !["async", "config", "ctrl", "admin"]
                .iter()
                .any(|w| n.contains(w))
    };
    let mut out: Vec<(u32, String)> = lines
        .into_iter()
        .filter(|(num, name)| msi.contains(num) && queue_like(name))
        .collect();
    out.sort_by_key(|(n, _)| *n);
    out
}

/// `0-3,8,10-11` as CPU numbers; None when it is not such a list.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?);
                if a > b || b - a > 65536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// CPU numbers as a list the kernel takes (`0-3,8`).
pub fn cpu_list(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// A CPU mask as `rps_cpus` and `xps_cpus` print it (hex, 32-bit words joined by commas,
/// most significant first) -> CPU numbers. None when it is not one.
pub fn parse_mask(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    let words: Vec<&str> = text.trim().split(',').collect();
    for (k, w) in words.iter().rev().enumerate() {
        let bits = u32::from_str_radix(w.trim(), 16).ok()?;
        for b in 0..32 {
            if bits & (1 << b) != 0 {
                cpus.push(k as u32 * 32 + b);
            }
        }
    }
    Some(cpus)
}

/// CPU numbers as the mask the kernel takes: `f`, `1,00000000` (CPU 32).
pub fn mask(cpus: &[u32]) -> String {
    let top = cpus.iter().max().map_or(0, |m| m / 32);
    let mut words = vec![0u32; top as usize + 1];
    for &c in cpus {
        words[(c / 32) as usize] |= 1 << (c % 32);
    }
    let mut out: Vec<String> = Vec::new();
    for (i, w) in words.iter().enumerate().rev() {
        out.push(if i == top as usize {
            format!("{w:x}")
        } else {
            format!("{w:08x}")
        });
    }
    out.join(",")
}

/// Whether a setting read back (`now`) is what was written (`applied`): the kernel prints a
/// mask padded (`0000000f` for `f`) and a flow count rounded up to a power of two.
pub fn same_setting(path: &str, now: &str, applied: &str) -> bool {
    if path.ends_with("_cpus") {
        return parse_mask(now).is_some() && parse_mask(now) == parse_mask(applied);
    }
    if path.ends_with("smp_affinity_list") {
        return parse_cpu_list(now).is_some() && parse_cpu_list(now) == parse_cpu_list(applied);
    }
    now.trim() == applied.trim()
}

/// The NIC of a per-NIC finding: its id is `CHECK[NIC]`.
fn nic_of(f: &Finding) -> Option<&str> {
    f.id.split_once('[').map(|(_, n)| n.trim_end_matches(']'))
}

/// What `--watch` measured that says whether the kernel spends real time receiving: the
/// softnet counters' growth and the busiest CPU's softirq share.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    /// Whether anything was measured (`--watch`).
    pub measured: bool,
    /// The measurements that call for tuning, for the plan ("softnet drops +120 in 10 s").
    pub found: Vec<String>,
    /// What was measured and found quiet.
    pub quiet: Vec<String>,
    /// NICs whose own receive drops (rx_missed_errors: no free descriptor in the ring) grew.
    pub ring_drops: Vec<String>,
    /// softnet's time_squeeze grew (the receive softirq ran out of budget): the measurement.
    pub squeezed: Option<String>,
}

/// A CPU spending this share of its time in softirq is busy receiving (the kernel's softirq
/// budget, netdev_budget_usecs, is 2 ms of every softirq run; a fifth of a CPU is well past
/// housekeeping).
pub const SOFTIRQ_BUSY_PERCENT: f64 = 20.0;

/// One CPU running this share of the receive softirqs, with others idle, is one queue or one
/// interrupt taking every packet.
pub const NET_RX_ONE_CPU_PERCENT: f64 = 75.0;
/// ...and only when it ran at least this many during the watch (a thousand a second over
/// ten seconds): an idle host's few softirqs land anywhere.
pub const NET_RX_BUSY: u64 = 10_000;

impl Evidence {
    /// From a report made with `--watch`: linux.softnet.dropped and .time_squeeze grown, or
    /// one CPU's share in linux.cpu.softirq at [`SOFTIRQ_BUSY_PERCENT`] or more.
    pub fn from_findings(catalog: &Catalog, findings: &[Finding]) -> Evidence {
        let mut e = Evidence::default();
        for f in findings {
            let grown = f.note.as_deref().is_some_and(|n| n.starts_with('+'));
            // Joined on the finding's key to its check's source, never on the id text.
            let Some(source) = f
                .key
                .filter(|k| !k.boot)
                .and_then(|k| catalog.checks.get(k.check))
                .map(|d| &d.check.source)
            else {
                continue;
            };
            match source {
                Source::Softnet(field) => {
                    let what = match field {
                        SoftnetField::Dropped => "softnet drops",
                        SoftnetField::TimeSqueeze => "softnet time_squeeze",
                    };
                    match (f.status, grown) {
                        (Status::Warn | Status::Fail | Status::Info, true) => {
                            e.measured = true;
                            let m = format!("{what} {}", f.note.as_deref().unwrap_or(""));
                            if *field == SoftnetField::TimeSqueeze {
                                e.squeezed = Some(m.clone());
                            }
                            e.found.push(m);
                        }
                        (Status::Pass, _) => {
                            e.measured = true;
                            e.quiet
                                .push(format!("{what}: {}", f.note.as_deref().unwrap_or("")));
                        }
                        _ => {}
                    }
                }
                Source::File(path) if path.ends_with("/statistics/rx_missed_errors") => {
                    let Some(nic) = nic_of(f) else { continue };
                    match f.status {
                        Status::Warn | Status::Fail if grown => {
                            e.measured = true;
                            e.found.push(format!(
                                "{nic} rx_missed_errors {}",
                                f.note.as_deref().unwrap_or("")
                            ));
                            e.ring_drops.push(nic.to_string());
                        }
                        Status::Pass => e.measured = true,
                        _ => {}
                    }
                }
                Source::Softirq(SoftirqField::NetRx) => {
                    let Some(Value::Text(spread)) = &f.current else {
                        continue;
                    };
                    if !spread.starts_with("cpu") {
                        continue;
                    }
                    e.measured = true;
                    let busiest = spread.split(", ").next().unwrap_or("");
                    let mut w = busiest.split_whitespace();
                    let share = w.nth(1).and_then(|p| p.parse::<f64>().ok());
                    let count = busiest
                        .rsplit_once('(')
                        .and_then(|(_, n)| n.trim_end_matches(')').parse::<u64>().ok());
                    let cpus = spread.matches("cpu").count();
                    match (share, count) {
                        (Some(s), Some(n))
                            if cpus > 1 && s >= NET_RX_ONE_CPU_PERCENT && n >= NET_RX_BUSY =>
                        {
                            e.found.push(format!("NET_RX: {busiest} on one CPU"))
                        }
                        _ => e.quiet.push(format!("NET_RX: busiest {busiest}")),
                    }
                }
                Source::Softirq(SoftirqField::PerCpu) => {
                    let Some(Value::Text(shares)) = &f.current else {
                        continue;
                    };
                    e.measured = true;
                    let busiest = shares.split(", ").next().unwrap_or("");
                    let pct = busiest
                        .split_whitespace()
                        .nth(1)
                        .and_then(|p| p.parse::<f64>().ok());
                    match pct {
                        Some(p) if p >= SOFTIRQ_BUSY_PERCENT => {
                            e.found.push(format!("softirq: {busiest} (busiest CPU)"))
                        }
                        _ => e.quiet.push(format!("softirq: busiest {busiest}")),
                    }
                }
                _ => {}
            }
        }
        e
    }
}

/// The NIC checks' advice after a `--watch`: with evidence the kernel is busy receiving, a NIC
/// check that misses its target becomes a warning that names the evidence and the change
/// (`apply --nic`); measured and quiet, it says the NIC is not what limits the host now.
/// Without a measurement the findings stay as they are (information).
pub fn advise(catalog: &Catalog, findings: &mut [Finding]) {
    let e = Evidence::from_findings(catalog, findings);
    if !e.measured {
        return;
    }
    for f in findings.iter_mut() {
        let per_nic = f.key.is_some_and(|k| k.per_nic && !k.boot);
        let Some(nic) = nic_of(f).filter(|_| per_nic).map(str::to_string) else {
            continue;
        };
        // A miss shown as information (a report-only row has nothing to miss).
        if f.status != Status::Info || f.compare == "report" {
            continue;
        }
        let advice = if e.found.is_empty() {
            format!(
                "not needed now: the kernel was not busy receiving during the watch ({})",
                e.quiet.join("; ")
            )
        } else {
            // A warning now, not advice: its fix is shown whole, like any other warning's.
            f.status = Status::Warn;
            f.severity = crate::catalog::Severity::Warn;
            format!(
                "the kernel is busy receiving ({}): spread {nic}'s receive work (wstune apply --watch 10 under this load, or apply --nic {nic})",
                e.found.join("; ")
            )
        };
        f.note = Some(match &f.note {
            Some(n) => format!("{n}; {advice}"),
            None => advice,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        let known = crate::profile::load("100k")
            .unwrap()
            .profile
            .variables()
            .into_keys()
            .collect();
        crate::catalog::load(crate::host::Platform::Linux, None, &known).unwrap()
    }

    /// A finding of the built-in check `id`, keyed to it as evaluate keys them.
    fn finding(cat: &Catalog, id: &str, current: &str) -> Finding {
        let check = cat.checks.iter().position(|d| d.check.id == id).unwrap();
        Finding {
            id: id.into(),
            title: String::new(),
            status: Status::Info,
            current: Some(Value::Text(current.into())),
            compare: "report",
            target: None,
            severity: crate::catalog::Severity::Info,
            scope: crate::catalog::Scope::Host,
            why: String::new(),
            fix: Default::default(),
            refs: vec![],
            note: None,
            key: Some(crate::catalog::eval::Key {
                check,
                per_nic: false,
                boot: false,
            }),
        }
    }

    #[test]
    fn receive_softirqs_on_one_cpu_are_evidence_and_an_even_spread_is_not() {
        let c = catalog();
        let net_rx = |text: &str| [finding(&c, "linux.cpu.net_rx", text)];
        let e = Evidence::from_findings(&c, &net_rx("cpu3 92 % (46000), cpu0 8 % (4000)"));
        assert!(
            e.measured && e.found == ["NET_RX: cpu3 92 % (46000) on one CPU"],
            "{e:?}"
        );
        let e = Evidence::from_findings(&c, &net_rx("cpu3 52 % (46000), cpu0 48 % (42000)"));
        assert!(
            e.measured && e.found.is_empty() && e.quiet[0].starts_with("NET_RX: busiest cpu3"),
            "{e:?}"
        );
        // A few softirqs on an idle host say nothing.
        assert!(Evidence::from_findings(&c, &net_rx("cpu1 100 % (12)"))
            .found
            .is_empty());
        let busy_cpu = [finding(&c, "linux.cpu.softirq", "cpu1 35.0 %, cpu0 2.0 %")];
        assert_eq!(
            Evidence::from_findings(&c, &busy_cpu).found,
            ["softirq: cpu1 35.0 % (busiest CPU)"]
        );
        // Joined on the key: a finding with that id but no key (not the catalog's) is not read.
        let mut stray = net_rx("cpu3 92 % (46000), cpu0 8 % (4000)");
        stray[0].key = None;
        assert!(!Evidence::from_findings(&c, &stray).measured);
    }

    #[test]
    fn masks_and_lists_read_and_write_the_kernels_forms() {
        assert_eq!(mask(&[0, 1, 2, 3]), "f");
        assert_eq!(mask(&[32]), "1,00000000");
        assert_eq!(parse_mask("00000000,0000000f").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(parse_mask("0").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_mask(&mask(&[1, 33, 40])).unwrap(), vec![1, 33, 40]);
        assert_eq!(
            parse_cpu_list("0-3,8,10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert!(parse_cpu_list("3-1").is_none());
        assert!(parse_mask("xyz").is_none());
    }

    /// scaling.rst's rule: one queue per physical core of the NIC's node, threads of a core
    /// counted once, at most the hardware's maximum.
    #[test]
    fn rss_queues_are_the_physical_cores_of_the_nics_node_capped_at_the_hardware() {
        use crate::host::memory::MemoryBackend;
        // Two nodes of 4 cores with 2 threads each; the NIC on node 1 (CPUs 4-7, 12-15).
        let mut b = MemoryBackend::default()
            .file("/sys/devices/system/cpu/online", "0-15\n")
            .file("/sys/class/net/eth0/device/local_cpulist", "4-7,12-15\n");
        for c in 0..16u32 {
            let base = c % 8;
            b = b.file(
                &format!("/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list"),
                &format!("{base},{}\n", base + 8),
            );
        }
        let (_, local) = local_cpus(&b, "eth0").unwrap();
        assert_eq!(physical_cores(&b, &local), [4, 5, 6, 7]);
        let vars = nic_vars(&b, "eth0");
        assert_eq!(vars["nic.physical_cores"], Value::Num(4));
        assert_eq!(vars["nic.rss_queues"], Value::Num(4));
        // The hardware's maximum caps it; an unknown maximum does not.
        let ch = |max_combined, max_rx| crate::host::Channels {
            max_combined,
            max_rx,
            ..Default::default()
        };
        assert_eq!(rss_queues(4, Some(ch(2, 0))), 2);
        assert_eq!(rss_queues(4, Some(ch(0, 3))), 3);
        assert_eq!(rss_queues(4, Some(ch(0, 0))), 4);
        assert_eq!(rss_queues(0, None), 1);
        // Without thread_siblings_list, package and core ids; without either, a CPU per core.
        let ids = MemoryBackend::default()
            .file(
                "/sys/devices/system/cpu/cpu0/topology/physical_package_id",
                "0\n",
            )
            .file("/sys/devices/system/cpu/cpu0/topology/core_id", "0\n")
            .file(
                "/sys/devices/system/cpu/cpu1/topology/physical_package_id",
                "0\n",
            )
            .file("/sys/devices/system/cpu/cpu1/topology/core_id", "0\n")
            .file(
                "/sys/devices/system/cpu/cpu2/topology/physical_package_id",
                "1\n",
            )
            .file("/sys/devices/system/cpu/cpu2/topology/core_id", "0\n");
        assert_eq!(physical_cores(&ids, &[0, 1, 2, 3]), [0, 2, 3]);
    }
}
