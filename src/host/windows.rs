//! The live Windows host: registry values through the windows-registry crate. Keys are opened
//! per read and closed when the handle drops (the crate's `Key` closes itself). The TCP dynamic
//! port range is not a plain registry value (Windows keeps it in an undocumented binary blob
//! under the NSI key), so it is read the documented way, through `netsh` (see dynamic_ports.rs).
//!
//! In recording mode (`wstune snapshot`) every value read is also kept in a [`RegistryFile`], so
//! the snapshot's `registry.yaml` holds exactly what the checks saw.

use super::dynamic_ports::{parse_netsh, PortRange};
use super::registry_file::{Adapter, RegistryFile};
use super::Fact;
use super::{Backend, HostInfo, Link, ReadError, WriteError};
use super::{IpVersion, Platform, RegType};
use std::cell::RefCell;
use windows_registry::LOCAL_MACHINE;

/// The network adapter device class; each adapter is a numbered subkey with its `*RSS*` keywords.
const NET_CLASS: &str =
    r"SYSTEM\CurrentControlSet\Control\Class\{4d36e972-e325-11ce-bfc1-08002be10318}";

/// HRESULT_FROM_WIN32(ERROR_FILE_NOT_FOUND): the key or value does not exist.
const NOT_FOUND: i32 = 0x8007_0002_u32 as i32;

#[derive(Default)]
pub struct WindowsBackend {
    recorder: Option<RefCell<RegistryFile>>,
}

impl WindowsBackend {
    pub fn live() -> WindowsBackend {
        WindowsBackend::default()
    }

    /// The live host, keeping every value read for `wstune snapshot`.
    pub fn recording() -> WindowsBackend {
        WindowsBackend {
            recorder: Some(RefCell::new(RegistryFile::default())),
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
}

/// The few Win32 calls the checks need beyond the registry.
mod api {
    use super::ReadError;
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
