//! What a Windows registry error means for the operator, as a pure function of its HRESULT so
//! it is tested on every OS: Wine runs every program as an administrator, so the "not
//! elevated" path can never be reached under Wine and is covered here instead.

use super::WriteError;

/// HRESULT_FROM_WIN32(ERROR_ACCESS_DENIED): HKLM opened for writing without elevation.
pub const ACCESS_DENIED: i32 = 0x8007_0005_u32 as i32;

/// A failed registry write: access denied says to run elevated, the way a Linux write without
/// root says to run as root; anything else keeps the system's own message.
pub fn write_error(what: &str, hresult: i32, message: &str) -> WriteError {
    if hresult == ACCESS_DENIED {
        WriteError::NotElevated(what.to_string())
    } else {
        WriteError::Other(format!("{what}: {message} (HRESULT {hresult:#010x})"))
    }
}

/// Whether opening the Tcpip parameters key for writing (`None`: it opened) means this process
/// may change the registry. Only access denied says no: any other failure (a missing key on a
/// stripped-down image) is left for the write itself to report precisely.
pub fn may_write(open_error: Option<i32>) -> bool {
    open_error != Some(ACCESS_DENIED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_denied_says_run_elevated_like_linux_says_run_as_root() {
        let e = write_error(
            r"HKLM\SYSTEM\CurrentControlSet\Services\Tcpip\Parameters\TcpTimedWaitDelay",
            ACCESS_DENIED,
            "Access is denied.",
        );
        assert_eq!(
            e.to_string(),
            r"permission denied writing HKLM\SYSTEM\CurrentControlSet\Services\Tcpip\Parameters\TcpTimedWaitDelay (run from an elevated prompt: Run as administrator)"
        );
        let linux = WriteError::Denied("/proc/sys/net/core/somaxconn".into()).to_string();
        assert!(linux.starts_with("permission denied writing /proc/sys/net/core/somaxconn"));
        // Any other failure keeps what Windows said, with the code to look up.
        let other = write_error(
            "K\\V",
            0x8007_03f3_u32 as i32,
            "The configuration registry key is invalid.",
        );
        assert_eq!(
            other.to_string(),
            "K\\V: The configuration registry key is invalid. (HRESULT 0x800703f3)"
        );
    }

    #[test]
    fn only_access_denied_means_not_elevated() {
        assert!(may_write(None));
        assert!(!may_write(Some(ACCESS_DENIED)));
        // ERROR_FILE_NOT_FOUND: not a privilege question.
        assert!(may_write(Some(0x8007_0002_u32 as i32)));
    }
}
