use super::fact::{mem_bytes, read_container_fact, reuseport_migrate_req};
use super::*;
use crate::catalog::facts::BootEntry;
use crate::host::memory::MemoryBackend;

fn entry(file: &str, line: usize, value: &str) -> Reading<BootEntry> {
    Reading::Value(BootEntry {
        file: file.into(),
        line,
        value: value.into(),
    })
}

#[test]
fn boot_order_follows_sysctl_system() {
    // 10-a in /usr/lib is masked by /etc's 10-a; 99 sorts last; sysctl.conf comes after all.
    let b = MemoryBackend::default()
        .file("/usr/lib/sysctl.d/10-a.conf", "net.core.somaxconn = 1\n")
        .file("/etc/sysctl.d/10-a.conf", "net.core.somaxconn = 2\n")
        .file(
            "/usr/lib/sysctl.d/50-b.conf",
            "net.core.somaxconn = 3\nfs.nr_open = 5\n",
        )
        .file("/etc/sysctl.conf", "fs.nr_open = 6\n");
    assert_eq!(
        boot_entry(&b, "net.core.somaxconn"),
        entry("/usr/lib/sysctl.d/50-b.conf", 1, "3")
    );
    assert_eq!(
        boot_entry(&b, "fs.nr_open"),
        entry("/etc/sysctl.conf", 1, "6")
    );
    let b = b.file("/run/sysctl.d/60-c.conf", "net.core.somaxconn = 4\n");
    assert_eq!(
        boot_entry(&b, "net.core.somaxconn"),
        entry("/run/sysctl.d/60-c.conf", 1, "4")
    );
    assert!(matches!(boot_entry(&b, "fs.file-max"), Reading::Missing(_)));
    assert!(matches!(
        boot_entry(&MemoryBackend::default(), "fs.file-max"),
        Reading::Unreadable(_)
    ));
}

#[test]
fn cgroup_limit_caps_memory() {
    let meminfo = std::fs::read_to_string("tests/fixtures/default/proc/meminfo").unwrap();
    let b = MemoryBackend::default().file("/proc/meminfo", &meminfo);
    let Reading::Value(Value::Num(total)) = mem_bytes(&b) else {
        panic!()
    };
    let b = b
        .file("/proc/self/cgroup", "0::/box\n")
        .file("/sys/fs/cgroup/box/memory.max", "1073741824\n");
    assert_eq!(mem_bytes(&b), Reading::Value(Value::Num(1 << 30)));
    assert!(total > 1 << 30);
}

/// The server's cgroup limits are the lowest of its cgroup and its parents; cgroup v1
/// keeps socket buffers out of its memory limit; a listener group needs two listeners.
#[test]
fn container_facts_follow_the_hierarchy_and_say_what_is_missing() {
    let b = MemoryBackend::default()
        .file("/proc/7/cgroup", "0::/pod/ctr\n")
        .file("/sys/fs/cgroup/pod/pids.max", "1024\n")
        .file("/sys/fs/cgroup/pod/ctr/pids.max", "max\n")
        .file("/sys/fs/cgroup/pod/ctr/memory.max", "max\n")
        .file("/sys/fs/cgroup/pod/ctr/memory.stat", "anon 1\nsock 4096\n");
    let fact = |f, pid| read_container_fact(&b, f, pid);
    assert_eq!(
        fact(Fact::CgroupPidsMax, Some(7)),
        Reading::Value(Value::Num(1024))
    );
    assert_eq!(
        fact(Fact::CgroupMemoryMax, Some(7)),
        Reading::Value(Value::Num(i64::MAX))
    );
    assert_eq!(cgroup_sock_bytes(&b, Some(7)), Some(4096));
    assert!(matches!(
        fact(Fact::CgroupPidsMax, None),
        Reading::Missing(_)
    ));
    let v1 = MemoryBackend::default().file("/proc/self/cgroup", "4:memory:/box\n");
    assert!(matches!(
        read_container_fact(&v1, Fact::CgroupMemoryMax, None),
        Reading::Unreadable(_)
    ));

    let listener = |inode: u32| {
        format!("   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 {inode} 1\n")
    };
    let head = "  sl  local_address rem_address   st\n";
    let one = MemoryBackend::default()
        .file("/proc/sys/net/ipv4/tcp_migrate_req", "0\n")
        .file("/proc/net/tcp", &format!("{head}{}", listener(1)));
    assert!(
        matches!(reuseport_migrate_req(&one), Reading::Missing(m) if m.contains("SO_REUSEPORT"))
    );
    let two = one.file(
        "/proc/net/tcp",
        &format!("{head}{}{}", listener(1), listener(2)),
    );
    assert_eq!(reuseport_migrate_req(&two), Reading::Value(Value::Num(0)));
    let old = MemoryBackend::default().file(
        "/proc/net/tcp",
        &format!("{head}{}{}", listener(1), listener(2)),
    );
    assert!(matches!(reuseport_migrate_req(&old), Reading::Missing(m) if m.contains("5.14")));
}

#[test]
fn each_sysctl_is_read_once_and_kept_whole() {
    let known = crate::profile::load("100k")
        .unwrap()
        .profile
        .variables()
        .into_keys()
        .collect();
    let catalog = crate::catalog::load(Platform::Linux, None, &known).unwrap();
    let b = MemoryBackend::default()
        .file("/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n")
        .file("/etc/sysctl.d/60-wstune.conf", "fs.nr_open = 1\n");
    let facts = gather(&catalog, &b, &FactsRequest::default());
    assert_eq!(
        facts.sysctls["net.ipv4.tcp_rmem"],
        Reading::Value(Value::List(vec![4096, 131072, 6291456]))
    );
    assert_eq!(
        facts.owned.get(owned::SYSCTL_FILE).map(String::as_str),
        Some("fs.nr_open = 1\n")
    );
    assert!(facts.boot.any);
}
