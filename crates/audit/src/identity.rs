//! Who and where: the host user runner runs as and the machine it runs on, as OCSF's
//! `actor.user` and `device`.
//!
//! A trail read in a SIEM sits beside other machines' and other people's; without these a
//! line says what was decided but not on whose behalf or on which host. Both are read once
//! when a trail opens: neither changes during a session, and every line carries them.

use serde_json::{Value, json};

/// The host user and machine every line names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The user's login name (the uid's entry in the password database, else `$USER`,
    /// else the uid itself).
    pub user: String,
    pub uid: u32,
    /// The machine's host name.
    pub hostname: String,
}

/// The user this process runs as and the machine it runs on, looked up once.
pub fn of_this_process() -> &'static Identity {
    static ONCE: std::sync::OnceLock<Identity> = std::sync::OnceLock::new();
    ONCE.get_or_init(Identity::look_up)
}

impl Identity {
    /// The user runner runs as and the machine it runs on, as the system says now.
    pub fn look_up() -> Identity {
        // SAFETY: getuid has no failure and touches no memory of ours.
        let uid = unsafe { libc::getuid() };
        let user = login_name(uid)
            .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| uid.to_string());
        Identity {
            user,
            uid,
            hostname: hostname().unwrap_or_else(|| "localhost".into()),
        }
    }

    /// OCSF's `user` object: its name and uid (a string in the schema), and whether it is
    /// the superuser.
    pub(crate) fn user_object(&self) -> Value {
        let (type_id, kind) = match self.uid {
            0 => (2, "Admin"),
            _ => (1, "User"),
        };
        json!({
            "name": self.user,
            "uid": self.uid.to_string(),
            "type_id": type_id,
            "type": kind,
        })
    }

    /// OCSF's `device` object: the host by name. Its kind (server, laptop, virtual) is not
    /// something runner can tell, so it says Unknown rather than guess.
    pub(crate) fn device_object(&self) -> Value {
        json!({
            "hostname": self.hostname,
            "name": self.hostname,
            "type_id": 0,
            "type": "Unknown",
        })
    }
}

/// The uid's login name from the password database (files, LDAP, whatever NSS says).
fn login_name(uid: u32) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value to be filled in.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to memory owned here and alive for the call; `buf.len()` is
    // its true size.
    let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_name points to a NUL-terminated string in `buf`.
    let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
    Some(name.to_string_lossy().into_owned()).filter(|n| !n.is_empty())
}

fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is ours and its length is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned()).filter(|h| !h.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_named_by_its_uid_and_the_machine_by_its_host_name() {
        let me = of_this_process();
        // SAFETY: as above.
        assert_eq!(me.uid, unsafe { libc::getuid() });
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(me.hostname, kernel.trim());
        assert!(!me.user.is_empty());
        let user = me.user_object();
        assert_eq!(user["uid"], me.uid.to_string());
        assert_eq!(me.device_object()["hostname"], kernel.trim());
    }
}
