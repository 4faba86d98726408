//! TLS session-ticket keys shared by several server processes: `serve --processes N` under one
//! supervisor. Each process's own random ticket key (rustls' `Ticketer`) let a client resume
//! only on the process that issued its ticket (about 1 in N reconnects, since SO_REUSEPORT
//! spreads them), and none after a rolling restart replaced every process, so a roll's
//! reconnect storm paid full handshakes. nginx's `ssl_session_ticket_key` and HAProxy's
//! `tls-ticket-keys` solve it the same way: the keys come from a file all workers read.
//!
//! The supervisor writes the file ([`rotate`]; mode 0600 in a directory only it can enter)
//! with the current key and the one before, and makes a new key every [`ROTATE`], as rustls
//! rotates its own; a ticket names its key, so one issued under the previous key still
//! resumes until the next rotation (up to twice [`ROTATE`]), and none older. Each process
//! ([`SharedTickets`]) reads the file when it starts and looks for a new one every
//! [`RECHECK`]. The keys live only in memory and in that file, which goes with the
//! supervisor: a new supervisor starts with new keys.
//!
//! A ticket is `key id (8) | nonce (12) | ChaCha20-Poly1305(state)`, the key id as
//! associated data.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// How long a key makes new tickets before the next one replaces it (rustls' own rotation).
pub const ROTATE: Duration = Duration::from_secs(6 * 3600);

/// How often a process looks for a rotated key file.
pub const RECHECK: Duration = Duration::from_secs(10);

const ID_LEN: usize = 8;
const KEY_LEN: usize = 32;

struct Key {
    id: [u8; ID_LEN],
    aead: LessSafeKey,
}

struct Keys {
    current: Key,
    previous: Option<Key>,
    modified: Option<SystemTime>,
}

/// A ticketer whose keys come from the supervisor's file (module docs).
pub struct SharedTickets {
    path: PathBuf,
    keys: RwLock<Keys>,
    next_check: Mutex<Instant>,
    rng: SystemRandom,
}

impl std::fmt::Debug for SharedTickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("SharedTickets")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SharedTickets {
    /// Read the keys at `path`; an error names the file and what is wrong with it.
    pub fn open(path: &Path) -> Result<SharedTickets, String> {
        let keys = read(path)?;
        Ok(SharedTickets {
            path: path.to_path_buf(),
            keys: RwLock::new(keys),
            next_check: Mutex::new(Instant::now() + RECHECK),
            rng: SystemRandom::new(),
        })
    }

    /// Take a rotated file's keys, at most once per [`RECHECK`]; a file that cannot be read
    /// leaves the keys as they were (the supervisor writes it whole or not at all).
    fn refresh(&self) {
        let Ok(mut next) = self.next_check.try_lock() else {
            return;
        };
        let now = Instant::now();
        if now < *next {
            return;
        }
        *next = now + RECHECK;
        drop(next);
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        let same = self
            .keys
            .read()
            .map(|k| k.modified == modified)
            .unwrap_or(true);
        if same {
            return;
        }
        if let (Ok(keys), Ok(mut k)) = (read(&self.path), self.keys.write()) {
            *k = keys;
        }
    }
}

impl rustls::server::ProducesTickets for SharedTickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        ROTATE.as_secs() as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.refresh();
        let keys = self.keys.read().ok()?;
        let key = &keys.current;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut body = plain.to_vec();
        key.aead
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(key.id),
                &mut body,
            )
            .ok()?;
        let mut out = Vec::with_capacity(ID_LEN + NONCE_LEN + body.len());
        out.extend_from_slice(&key.id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&body);
        Some(out)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        self.refresh();
        if ticket.len() < ID_LEN + NONCE_LEN {
            return None;
        }
        let (id, rest) = ticket.split_at(ID_LEN);
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let keys = self.keys.read().ok()?;
        let key = std::iter::once(&keys.current)
            .chain(keys.previous.as_ref())
            .find(|k| k.id == id)?;
        let mut body = body.to_vec();
        let plain = key
            .aead
            .open_in_place(
                Nonce::try_assume_unique_for_key(nonce).ok()?,
                Aad::from(&key.id),
                &mut body,
            )
            .ok()?;
        Some(plain.to_vec())
    }
}

/// `cfg` with its tickets made and opened with the keys at `path` (every other setting as it
/// was).
pub fn install(cfg: &crate::tls::Config, path: &Path) -> Result<crate::tls::Config, String> {
    let mut c = rustls::ServerConfig::clone(cfg);
    c.ticketer = std::sync::Arc::new(SharedTickets::open(path)?);
    Ok(std::sync::Arc::new(c))
}

/// Write a new current key to `path`, the old current one kept as the previous (the
/// supervisor's side: at start, then every [`ROTATE`]). Written whole or not at all (a
/// temporary file, mode 0600, renamed into place).
pub fn rotate(path: &Path) -> Result<(), String> {
    let mut fresh = [0u8; ID_LEN + KEY_LEN];
    SystemRandom::new()
        .fill(&mut fresh)
        .map_err(|_| "no random numbers for a session ticket key".to_string())?;
    let old = std::fs::read_to_string(path).ok();
    let mut text = format!("{}\n", hex(&fresh));
    if let Some(current) = old.as_deref().and_then(|t| t.lines().next()) {
        text.push_str(current);
        text.push('\n');
    }
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let mut f = o.open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!(
            "cannot write the session ticket keys to {}: {e}",
            path.display()
        )
    })
}

fn read(path: &Path) -> Result<Keys, String> {
    let bad = |why: &str| format!("session ticket keys {}: {why}", path.display());
    let meta = std::fs::metadata(path).map_err(|e| bad(&e.to_string()))?;
    let text = std::fs::read_to_string(path).map_err(|e| bad(&e.to_string()))?;
    let mut keys = text
        .lines()
        .map(|l| key(l).ok_or_else(|| bad("a line is not a key")));
    let current = keys.next().ok_or_else(|| bad("no key in the file"))??;
    let previous = keys.next().transpose()?;
    Ok(Keys {
        current,
        previous,
        modified: meta.modified().ok(),
    })
}

fn key(line: &str) -> Option<Key> {
    let bytes = unhex(line.trim())?;
    if bytes.len() != ID_LEN + KEY_LEN {
        return None;
    }
    let (id, secret) = bytes.split_at(ID_LEN);
    Some(Key {
        id: id.try_into().ok()?,
        aead: LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, secret).ok()?),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::ProducesTickets;

    /// Two processes reading one file resume each other's tickets; after a rotation a ticket
    /// of the previous key still opens, and after a second one it does not.
    #[test]
    fn processes_sharing_the_file_open_each_others_tickets_across_one_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tickets");
        rotate(&path).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (a, b) = (
            SharedTickets::open(&path).unwrap(),
            SharedTickets::open(&path).unwrap(),
        );
        let t = a.encrypt(b"session state").unwrap();
        assert_eq!(b.decrypt(&t).unwrap(), b"session state");
        // Tampered: refused.
        let mut bad = t.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(b.decrypt(&bad).is_none());
        assert!(b.decrypt(&t[..10]).is_none());
        rotate(&path).unwrap();
        let c = SharedTickets::open(&path).unwrap();
        assert_eq!(c.decrypt(&t).unwrap(), b"session state");
        let t2 = c.encrypt(b"newer").unwrap();
        assert_ne!(t2[..ID_LEN], t[..ID_LEN], "a new key makes new tickets");
        rotate(&path).unwrap();
        let d = SharedTickets::open(&path).unwrap();
        assert!(d.decrypt(&t).is_none(), "two rotations old");
        assert_eq!(d.decrypt(&t2).unwrap(), b"newer");
        // Debug never shows a key.
        assert!(!format!("{d:?}").contains(&std::fs::read_to_string(&path).unwrap()[..16]));
    }

    #[test]
    fn a_file_that_is_no_key_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tickets");
        std::fs::write(&path, "not hex\n").unwrap();
        let e = SharedTickets::open(&path).unwrap_err();
        assert!(e.contains("tickets") && e.contains("not a key"), "{e}");
        let e = SharedTickets::open(&dir.path().join("absent")).unwrap_err();
        assert!(e.contains("absent"), "{e}");
    }
}
