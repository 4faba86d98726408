//! The live Windows host: registry values through the windows-registry crate. Keys are opened
//! per read and closed when the handle drops (the crate's `Key` closes itself). The TCP dynamic
//! port range is not a plain registry value (Windows keeps it in an undocumented binary blob
//! under the NSI key), so it is read the documented way, through `netsh` (see dynamic_ports.rs).
//!
//! In recording mode (`wstune snapshot`) every value read is also kept in a [`RegistryFile`], so
//! the snapshot's `registry.yaml` holds exactly what the checks saw.
//!
//! `wstune watch` reads the TCP table (GetExtendedTcpTable, IPv4 and IPv6, with owning pids)
//! and the TCP statistics (GetTcpStatisticsEx2, else GetTcpStatisticsEx) through IP Helper;
//! tcp_table.rs decodes both.

use super::dynamic_ports::{parse_netsh, PortRange};
use super::registry_file::{Adapter, RegistryFile};
use super::sockets::{Sock, TcpCounters, Which};
use super::Fact;
use super::{Backend, HostInfo, Link, ReadError, WriteError};
use super::{IpVersion, Platform, RegType};
use std::cell::RefCell;
use std::time::{Duration, Instant};
use windows_registry::LOCAL_MACHINE;

/// The network adapter device class; each adapter is a numbered subkey with its `*RSS*` keywords.
const NET_CLASS: &str =
    r"SYSTEM\CurrentControlSet\Control\Class\{4d36e972-e325-11ce-bfc1-08002be10318}";

/// HRESULT_FROM_WIN32(ERROR_FILE_NOT_FOUND): the key or value does not exist.
const NOT_FOUND: i32 = 0x8007_0002_u32 as i32;

#[derive(Default)]
pub struct WindowsBackend {
    recorder: Option<RefCell<RegistryFile>>,
    /// The dynamic port range a watch last read, and when: netsh is a process to start, too
    /// costly to run every interval for a value an operator changes rarely.
    ports: RefCell<Option<(Instant, Result<PortRange, ReadError>)>>,
}

/// How long a watch keeps the dynamic port range it read before asking netsh again.
const PORTS_FRESH: Duration = Duration::from_secs(60);

impl WindowsBackend {
    pub fn live() -> WindowsBackend {
        WindowsBackend::default()
    }

    /// The live host, keeping every value read for `wstune snapshot`.
    pub fn recording() -> WindowsBackend {
        WindowsBackend {
            recorder: Some(RefCell::new(RegistryFile::default())),
            ..WindowsBackend::default()
        }
    }

    /// What was read, as a `registry.yaml` tree holds it.
    pub fn take_recording(&self) -> Option<RegistryFile> {
        self.recorder
            .as_ref()
            .map(|r| std::mem::take(&mut *r.borrow_mut()))
    }

    fn record(&self, f: impl FnOnce(&mut RegistryFile)) {
        if let Some(r) = &self.recorder {
            f(&mut r.borrow_mut());
        }
    }
}

/// netsh from the system directory, never from PATH: an elevated wstune must not run whatever
/// `netsh.exe` the current directory or PATH offers.
fn netsh_path() -> std::path::PathBuf {
    let root = std::env::var_os("SystemRoot").unwrap_or_else(|| r"C:\Windows".into());
    std::path::Path::new(&root)
        .join("System32")
        .join("netsh.exe")
}

/// Windows PowerShell from the system directory, never from PATH (as for netsh).
fn powershell_path() -> std::path::PathBuf {
    let root = std::env::var_os("SystemRoot").unwrap_or_else(|| r"C:\Windows".into());
    std::path::Path::new(&root).join(r"System32\WindowsPowerShell\v1.0\powershell.exe")
}

fn hklm_path(key: &str) -> Result<&str, ReadError> {
    key.strip_prefix(r"HKLM\")
        .ok_or_else(|| ReadError::Other(format!("{key}: only HKLM keys are read")))
}

fn map_err(what: &str, e: windows_result::Error) -> ReadError {
    if e.code().0 == NOT_FOUND {
        ReadError::NotFound(what.to_string())
    } else {
        ReadError::Other(format!("{what}: {e}"))
    }
}

fn write_err(what: &str, e: windows_result::Error) -> WriteError {
    super::windows_errors::write_error(what, e.code().0, &e.message())
}

/// The key every Windows apply writes: whether this process may open it for writing is whether
/// it runs elevated (HKLM is writable by Administrators only).
const TCPIP_PARAMETERS: &str = r"SYSTEM\CurrentControlSet\Services\Tcpip\Parameters";

/// `%ProgramData%\wstune`: machine-wide state of a service, where Windows operators look for it.
pub fn state_dir() -> std::path::PathBuf {
    let data = std::env::var_os("ProgramData").unwrap_or_else(|| r"C:\ProgramData".into());
    std::path::Path::new(&data).join("wstune")
}

impl Backend for WindowsBackend {
    fn platform(&self) -> Platform {
        Platform::Windows
    }
    fn describe(&self) -> HostInfo {
        super::live_describe()
    }
    fn read(&self, path: &str) -> Result<String, ReadError> {
        Err(ReadError::Unsupported(format!(
            "{path}: no /proc on Windows"
        )))
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, ReadError> {
        Err(ReadError::Unsupported(format!("{dir}: no /sys on Windows")))
    }
    fn links(&self) -> Result<Vec<Link>, ReadError> {
        let class = LOCAL_MACHINE
            .open(NET_CLASS)
            .map_err(|e| map_err(NET_CLASS, e))?;
        let mut out = Vec::new();
        for sub in class.keys().map_err(|e| map_err(NET_CLASS, e))? {
            let Ok(key) = class.open(&sub) else { continue };
            // Only adapters that expose RSS keywords are NICs worth checking.
            if key.get_string("*RSS").is_err() {
                continue;
            }
            let name = key.get_string("DriverDesc").unwrap_or_else(|_| sub.clone());
            self.record(|r| {
                r.adapters.push(Adapter {
                    name: name.clone(),
                    key: sub.clone(),
                })
            });
            out.push(Link {
                name,
                physical: true,
                rx_queues: None,
                tx_queues: None,
                registry_key: Some(sub),
            });
        }
        Ok(out)
    }
    fn systemd_property(&self, _unit: &str, _property: &str) -> Result<String, ReadError> {
        Err(ReadError::Unsupported(
            "systemd exists only on Linux".into(),
        ))
    }
    fn registry(&self, key: &str, value: &str, kind: RegType) -> Result<String, ReadError> {
        let what = format!(r"{key}\{value}");
        let k = LOCAL_MACHINE
            .open(hklm_path(key)?)
            .map_err(|e| map_err(&what, e))?;
        let data = match kind {
            RegType::Dword => k.get_u32(value).map(|v| v.to_string()),
            RegType::Sz => k.get_string(value),
        }
        .map_err(|e| map_err(&what, e))?;
        self.record(|r| {
            // Cannot fail: the data was just read as this type.
            let _ = r.set(key, value, kind, Some(&data));
        });
        Ok(data)
    }
    fn dynamic_ports(&self, ip: IpVersion) -> Result<PortRange, ReadError> {
        let netsh = netsh_path();
        let args = ["int", ip.as_str(), "show", "dynamicport", "tcp"];
        let shown = format!("netsh {}", args.join(" "));
        let out = std::process::Command::new(&netsh)
            .args(args)
            .output()
            .map_err(|e| ReadError::Other(format!("cannot run {}: {e}", netsh.display())))?;
        // netsh prints in the console code page; only the digits matter (see parse_netsh).
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(ReadError::Other(format!(
                "{shown} failed ({}): {}",
                out.status,
                text.trim()
            )));
        }
        let range = parse_netsh(&text).map_err(|e| ReadError::Other(format!("{shown}: {e}")))?;
        self.record(|r| {
            r.dynamic_ports.insert(ip, range);
        });
        Ok(range)
    }
    fn write_runtime(&self, path: &str, _value: &str) -> Result<(), WriteError> {
        Err(WriteError::Other(format!(
            "{path}: no /proc/sys on Windows"
        )))
    }
    fn set_nofile(&self, _pid: u32, _soft: u64, _hard: u64) -> Result<(), WriteError> {
        Err(WriteError::Other(
            "Windows has no per-process file-descriptor limit".into(),
        ))
    }
    /// `Restart-NetAdapter` by the adapter's description (its DriverDesc, the name wstune
    /// shows): the driver is stopped and started again and reads its keywords.
    fn restart_adapter(&self, name: &str) -> Result<(), WriteError> {
        let ps = powershell_path();
        let quoted = name.replace('\'', "''");
        let out = std::process::Command::new(&ps)
            .args([
                "-NoProfile",
                "-NonInteractive",
                "-Command",
                &format!(
                    "Restart-NetAdapter -InterfaceDescription '{quoted}' -Confirm:$false -ErrorAction Stop; 'wstune: restarted'"
                ),
            ])
            .output()
            .map_err(|e| WriteError::Other(format!("cannot run {}: {e}", ps.display())))?;
        // Only the line the command prints after the restart counts: a PowerShell stand-in
        // that runs nothing (Wine's) exits 0 too.
        let done = String::from_utf8_lossy(&out.stdout).contains("wstune: restarted");
        if out.status.success() && done {
            Ok(())
        } else if out.status.success() {
            Err(WriteError::Other(format!(
                "{} ran but did not confirm the restart (not Windows PowerShell?)",
                ps.display()
            )))
        } else {
            Err(WriteError::Other(format!(
                "Restart-NetAdapter failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }
    fn set_registry(
        &self,
        key: &str,
        value: &str,
        kind: RegType,
        data: Option<&str>,
    ) -> Result<(), WriteError> {
        let what = format!(r"{key}\{value}");
        let path = hklm_path(key).map_err(|e| WriteError::Other(e.to_string()))?;
        let k = LOCAL_MACHINE
            .create(path)
            .map_err(|e| write_err(&what, e))?;
        match (data, kind) {
            (None, _) => match k.remove_value(value) {
                Err(e) if e.code().0 == NOT_FOUND => Ok(()),
                r => r,
            },
            (Some(d), RegType::Dword) => {
                let n = d
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| WriteError::Other(format!("{what}: {d:?} is not a REG_DWORD")))?;
                k.set_u32(value, n)
            }
            (Some(d), RegType::Sz) => k.set_string(value, d),
        }
        .map_err(|e| write_err(&what, e))
    }
    fn privileged(&self) -> bool {
        // Not elevated: HKLM opens read-only and a write-open is refused with access denied.
        let opened = LOCAL_MACHINE
            .options()
            .read()
            .write()
            .open(TCPIP_PARAMETERS);
        super::windows_errors::may_write(opened.err().map(|e| e.code().0))
    }
    fn page_size(&self) -> u64 {
        4096
    }
    fn host_fact(&self, fact: Fact, pid: Option<u32>) -> Option<Result<i64, ReadError>> {
        let r = match fact {
            Fact::Cpus => {
                let n = api::processors();
                self.record(|r| r.host.cpus = Some(n));
                Ok(i64::from(n))
            }
            Fact::MemBytes => api::physical_memory().map(|b| {
                self.record(|r| r.host.mem_bytes = Some(b));
                b.min(i64::MAX as u64) as i64
            }),
            Fact::ProcessHandles => match pid {
                None => Err(ReadError::Other("needs --pid".into())),
                Some(pid) => api::handle_count(pid).map(|n| {
                    self.record(|r| {
                        r.processes.insert(
                            pid,
                            super::registry_file::ProcessFacts {
                                name: None,
                                handles: n,
                            },
                        );
                    });
                    i64::from(n)
                }),
            },
            _ => return None,
        };
        Some(r)
    }
    fn process_exists(&self, pid: u32) -> bool {
        api::process_exists(pid)
    }
    fn tcp_sockets(&self, which: Which, visit: &mut dyn FnMut(&Sock)) -> Result<(), ReadError> {
        for v6 in [false, true] {
            api::with_tcp_table(v6, which, |table| {
                if v6 {
                    super::tcp_table::visit_v6(table, visit)
                } else {
                    super::tcp_table::visit_v4(table, visit)
                }
            })?
            .map_err(ReadError::Other)?;
        }
        Ok(())
    }
    fn tcp_counters(&self, names: &[&str]) -> TcpCounters {
        let mut out = TcpCounters::default();
        match api::tcp_stats() {
            Ok(stats) => {
                for name in names {
                    if let Some(v) = stats.get(name) {
                        out.values.insert(name.to_string(), v);
                    }
                }
            }
            Err(e) => {
                out.unavailable.insert("tcp statistics".into(), e);
            }
        }
        let linux: Vec<&str> = names
            .iter()
            .filter_map(|n| n.strip_prefix("TcpExt."))
            .collect();
        if !linux.is_empty() {
            out.unavailable.insert(
                "TcpExt counters".into(),
                ReadError::Unsupported(format!(
                    "not on Windows: {} are counters of the Linux kernel; Windows' TCP statistics have no listen-queue, memory or SYN-cookie counters",
                    linux.join(", ")
                )),
            );
        }
        out
    }
    fn ephemeral_ports(&self) -> Result<(u16, u16), ReadError> {
        let mut cached = self.ports.borrow_mut();
        let range = match &*cached {
            Some((at, r)) if at.elapsed() < PORTS_FRESH => r.clone(),
            _ => {
                let r = self.dynamic_ports(IpVersion::Ipv4);
                *cached = Some((Instant::now(), r.clone()));
                r
            }
        }?;
        // A range is at most start + count <= 65536 (PortRange::new), so both fit a port.
        Ok((range.start as u16, range.last() as u16))
    }
}

/// The few Win32 calls the checks and the watch need beyond the registry.
mod api {
    use super::super::sockets::Which;
    use super::super::tcp_table::TcpStats;
    use super::ReadError;
    use windows_sys::Win32::Foundation::{ERROR_INSUFFICIENT_BUFFER, NO_ERROR};
    use windows_sys::Win32::NetworkManagement::IpHelper::{
        GetExtendedTcpTable, GetTcpStatisticsEx, MIB_TCPSTATS2, MIB_TCPSTATS_LH,
        TCP_TABLE_OWNER_PID_CONNECTIONS, TCP_TABLE_OWNER_PID_LISTENER,
    };
    use windows_sys::Win32::Networking::WinSock::{AF_INET, AF_INET6};
    use windows_sys::Win32::System::LibraryLoader::{GetProcAddress, LoadLibraryW};

    /// One family's TCP table of `which` sockets with their owning pids, handed to `read` as
    /// its raw bytes (tcp_table.rs decodes them; a busy host's table is megabytes, read in
    /// place). The table can grow between asking its size and reading it: asked again with
    /// room to spare, a few times.
    pub fn with_tcp_table<R>(
        v6: bool,
        which: Which,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, ReadError> {
        let af = u32::from(if v6 { AF_INET6 } else { AF_INET });
        let class = match which {
            Which::Listeners => TCP_TABLE_OWNER_PID_LISTENER,
            Which::Connections => TCP_TABLE_OWNER_PID_CONNECTIONS,
        };
        let family = if v6 { "IPv6" } else { "IPv4" };
        // u64s: the rows are read as DWORDs, so the buffer is aligned for them.
        let mut buf: Vec<u64> = Vec::new();
        for _ in 0..5 {
            let mut size = (buf.len() * 8) as u32;
            let ptr = if buf.is_empty() {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr().cast()
            };
            // SAFETY: `ptr` is null with size 0, or `buf` with its length in bytes.
            let r = unsafe { GetExtendedTcpTable(ptr, &mut size, 0, af, class, 0) };
            match r {
                NO_ERROR if !buf.is_empty() => {
                    // SAFETY: the u64s of `buf` viewed as bytes, within its length.
                    let bytes = unsafe {
                        std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len() * 8)
                    };
                    return Ok(read(bytes));
                }
                NO_ERROR | ERROR_INSUFFICIENT_BUFFER => {
                    let want = size as usize + size as usize / 4 + 4096;
                    buf = vec![0u64; want.div_ceil(8)];
                }
                e => {
                    return Err(ReadError::Other(format!(
                        "GetExtendedTcpTable ({family}): {}",
                        std::io::Error::from_raw_os_error(e as i32)
                    )))
                }
            }
        }
        Err(ReadError::Other(format!(
            "GetExtendedTcpTable ({family}): the table kept growing while it was read"
        )))
    }

    type TcpStatisticsEx2 = unsafe extern "system" fn(*mut MIB_TCPSTATS2, u32) -> u32;

    /// GetTcpStatisticsEx2 where the system has it (Windows 10 1703 and later; not Wine), found
    /// at run time: importing it would keep wstune.exe from starting where it is missing.
    fn statistics_ex2() -> Option<TcpStatisticsEx2> {
        let name: Vec<u16> = "iphlpapi.dll\0".encode_utf16().collect();
        // SAFETY: a NUL-terminated name; the module stays loaded for the process's life.
        let module = unsafe { LoadLibraryW(name.as_ptr()) };
        if module.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated export name of a loaded module.
        let f = unsafe { GetProcAddress(module, c"GetTcpStatisticsEx2".as_ptr().cast()) }?;
        // SAFETY: the export has this signature (iphlpapi.h).
        Some(unsafe {
            std::mem::transmute::<unsafe extern "system" fn() -> isize, TcpStatisticsEx2>(f)
        })
    }

    fn stats_of(af: u32) -> Result<TcpStats, u32> {
        if let Some(ex2) = statistics_ex2() {
            let mut s = MIB_TCPSTATS2::default();
            // SAFETY: a MIB_TCPSTATS2 to fill.
            let r = unsafe { ex2(&mut s, af) };
            if r == NO_ERROR {
                return Ok(TcpStats {
                    active_opens: s.dwActiveOpens.into(),
                    passive_opens: s.dwPassiveOpens.into(),
                    attempt_fails: s.dwAttemptFails.into(),
                    estab_resets: s.dwEstabResets.into(),
                    curr_estab: s.dwCurrEstab.into(),
                    in_segs: s.dw64InSegs,
                    out_segs: s.dw64OutSegs,
                    retrans_segs: s.dwRetransSegs.into(),
                    in_errs: s.dwInErrs.into(),
                    out_rsts: s.dwOutRsts.into(),
                    num_conns: s.dwNumConns.into(),
                });
            }
        }
        let mut s = MIB_TCPSTATS_LH::default();
        // SAFETY: a MIB_TCPSTATS to fill.
        let r = unsafe { GetTcpStatisticsEx(&mut s, af) };
        if r != NO_ERROR {
            return Err(r);
        }
        Ok(TcpStats {
            active_opens: s.dwActiveOpens.into(),
            passive_opens: s.dwPassiveOpens.into(),
            attempt_fails: s.dwAttemptFails.into(),
            estab_resets: s.dwEstabResets.into(),
            curr_estab: s.dwCurrEstab.into(),
            in_segs: s.dwInSegs.into(),
            out_segs: s.dwOutSegs.into(),
            retrans_segs: s.dwRetransSegs.into(),
            in_errs: s.dwInErrs.into(),
            out_rsts: s.dwOutRsts.into(),
            num_conns: s.dwNumConns.into(),
        })
    }

    /// IPv4's and IPv6's TCP statistics together; a host without IPv6 counts IPv4 alone.
    pub fn tcp_stats() -> Result<TcpStats, ReadError> {
        let v4 = stats_of(u32::from(AF_INET)).map_err(|e| {
            ReadError::Other(format!(
                "GetTcpStatisticsEx (IPv4): {}",
                std::io::Error::from_raw_os_error(e as i32)
            ))
        })?;
        Ok(TcpStats::both(v4, stats_of(u32::from(AF_INET6)).ok()))
    }

    use windows_sys::Win32::Foundation::{CloseHandle, GetLastError, ERROR_ACCESS_DENIED};
    use windows_sys::Win32::System::SystemInformation::{GlobalMemoryStatusEx, MEMORYSTATUSEX};
    use windows_sys::Win32::System::Threading::{
        GetActiveProcessorCount, GetProcessHandleCount, OpenProcess, ALL_PROCESSOR_GROUPS,
        PROCESS_QUERY_LIMITED_INFORMATION,
    };

    /// Logical processors in every processor group (a host with more than 64 has several).
    pub fn processors() -> u32 {
        // SAFETY: no arguments beyond a constant; returns 0 only on failure.
        let n = unsafe { GetActiveProcessorCount(ALL_PROCESSOR_GROUPS) };
        if n == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
        } else {
            n
        }
    }

    pub fn physical_memory() -> Result<u64, ReadError> {
        // SAFETY: a zeroed MEMORYSTATUSEX with dwLength set is what the call requires.
        let mut m: MEMORYSTATUSEX = unsafe { std::mem::zeroed() };
        m.dwLength = std::mem::size_of::<MEMORYSTATUSEX>() as u32;
        if unsafe { GlobalMemoryStatusEx(&mut m) } == 0 {
            return Err(ReadError::Other(format!(
                "GlobalMemoryStatusEx: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(m.ullTotalPhys)
    }

    /// A process handle with the least access that still answers queries, closed on drop.
    struct Process(windows_sys::Win32::Foundation::HANDLE);

    impl Process {
        fn open(pid: u32) -> Result<Process, u32> {
            // SAFETY: plain call; a null handle is the documented failure.
            let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
            if h.is_null() {
                Err(unsafe { GetLastError() })
            } else {
                Ok(Process(h))
            }
        }
    }

    impl Drop for Process {
        fn drop(&mut self) {
            // SAFETY: the handle came from OpenProcess and is closed once.
            unsafe { CloseHandle(self.0) };
        }
    }

    /// Exists, even if it belongs to someone we may not query (access denied).
    pub fn process_exists(pid: u32) -> bool {
        match Process::open(pid) {
            Ok(_) => true,
            Err(e) => e == ERROR_ACCESS_DENIED,
        }
    }

    pub fn handle_count(pid: u32) -> Result<u32, ReadError> {
        let p = Process::open(pid).map_err(|e| {
            ReadError::Other(format!(
                "cannot open process {pid}: {} (another user's process needs an elevated prompt)",
                std::io::Error::from_raw_os_error(e as i32)
            ))
        })?;
        let mut n = 0u32;
        // SAFETY: a valid process handle and a pointer to a u32.
        if unsafe { GetProcessHandleCount(p.0, &mut n) } == 0 {
            return Err(ReadError::Other(format!(
                "GetProcessHandleCount({pid}): {}",
                std::io::Error::last_os_error()
            )));
        }
        // A running process holds handles (its own threads, at least): 0 is a stub answering,
        // as Wine's does, never a count to judge.
        if n == 0 {
            return Err(ReadError::Unsupported(format!(
                "GetProcessHandleCount({pid}) answered 0: not implemented on this system (Wine)"
            )));
        }
        Ok(n)
    }
}
