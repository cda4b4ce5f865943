//! Who holds a proxied connection's client end, for a rule that lets only some programs
//! reach a host (`[network.hosts."NAME"] programs`, judged on the host).
//!
//! One process naming itself is not enough: a socket is a descriptor, and a descriptor
//! can be shared. A python that connects and then `exec`s git in one process while a
//! forked child keeps the same socket has two holders, and the one that talks is not the
//! one a first-found walk of `/proc` would name. So every process whose descriptors include
//! the socket is reported, and all of them must be allowed.
//!
//! A named executable can also be made to run someone else's code: the dynamic loader
//! adds libraries named by `LD_PRELOAD`, `LD_AUDIT` or found through `LD_LIBRARY_PATH`, and
//! a copy of the program saved where the sandbox writes is no longer the installed one.
//! So each holder comes with the loader variables it was started with
//! (`/proc/PID/environ`) and the files it runs code from (the executable mappings of
//! `/proc/PID/maps`, its own file included) that lie where the sandbox can write. What
//! counts as such a place: beneath a writable root or a temp directory, or on a file
//! system mounted read-write outside the system directories (those are read-only to every
//! command under landlock, and the container's root file system is read-only under
//! docker).
//!
//! A process that hides its descriptors (not dumpable: after `prctl(PR_SET_DUMPABLE, 0)`,
//! or started from a file it may not read) could be a holder nobody sees; one that belongs
//! to the sandbox is reported as unreadable, and the host refuses rather than guess.
//!
//! What this cannot see is said in docs/NETWORK.md: the holders are those of one moment
//! (the accept), and code already running inside a process can hide itself.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use runner_protocol::Holder;

/// The loader variables that make a program run code it was not built with. Others
/// (`LD_BIND_NOW`, `LD_DEBUG`) change how it loads, not what.
const LOADER_VARS: &[&str] = &["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"];

/// A loader variable's value is cut here in reports: the name and the start say enough.
const SHOWN_VALUE: usize = 200;

/// Temp directories every sandbox can write, whatever its roots.
const TEMP_DIRS: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];

/// Where the sandbox can write, as far as code is concerned (see the module's docs).
#[derive(Debug, Clone, Default)]
pub struct Places {
    writable: Vec<PathBuf>,
}

impl Places {
    /// The writable roots given to the server, the temp directories, and `$TMPDIR`.
    pub fn new(writable_roots: impl IntoIterator<Item = PathBuf>) -> Places {
        let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
        let writable = writable_roots
            .into_iter()
            .chain(TEMP_DIRS.iter().map(PathBuf::from))
            .chain(tmpdir)
            .filter(|p| p.is_absolute())
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
            .collect();
        Places { writable }
    }

    /// Whether code mapped from `path` (as `/proc/PID/maps` writes it) could have been
    /// written by the sandbox. A path that no longer resolves (deleted, a memfd) is
    /// judged by where it was, and outside the system directories it counts as writable.
    pub fn writable(&self, path: &str) -> bool {
        let path = Path::new(path.strip_suffix(" (deleted)").unwrap_or(path));
        if self.writable.iter().any(|w| path.starts_with(w)) {
            return true;
        }
        if mounted_read_only(path) {
            return false;
        }
        !crate::confine::SYSTEM_DIRS
            .iter()
            .filter(|d| **d != "/proc")
            .any(|d| path.starts_with(d))
    }
}

fn mounted_read_only(path: &Path) -> bool {
    rustix::fs::statvfs(path)
        .is_ok_and(|s| s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
}

/// Every process of the sandbox that holds the socket with `inode`, each as the host
/// judges it, and every process of the sandbox whose descriptors cannot be read.
pub fn holders_of(inode: u64, places: &Places) -> Vec<Holder> {
    let wanted = format!("socket:[{inode}]");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        match holds(pid, &wanted) {
            Ok(true) => found.push(holder(pid, places)),
            Ok(false) => {}
            // Gone meanwhile: it holds nothing now.
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) if in_sandbox(pid) => found.push(Holder {
                pid,
                unread: Some(format!(
                    "process {pid} in the sandbox hides its descriptors (it is not dumpable: {e}), so whether it holds this connection cannot be told"
                )),
                ..Holder::default()
            }),
            Err(_) => {}
        }
    }
    found
}

/// Whether process `pid` has the socket among its descriptors. The list of a process
/// that is not dumpable can be readable while every link in it is not: that is an error,
/// not "no".
fn holds(pid: i32, wanted: &str) -> std::io::Result<bool> {
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        match std::fs::read_link(fd.path()) {
            Ok(link) if link.as_os_str() == wanted => return Ok(true),
            Ok(_) => {}
            // Closed meanwhile.
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Whether `pid` is one of the sandbox's commands rather than the server, the init above
/// it, or (without a PID namespace) a process of the host. In a namespace of its own the
/// server is the child of its init (PID 1), and every other process is a command or an
/// orphan of one; without one the server is the subreaper of its commands, and they all
/// descend from it.
fn in_sandbox(pid: i32) -> bool {
    let me = std::process::id() as i32;
    if pid == me || pid == 1 {
        return false;
    }
    // SAFETY: getppid takes nothing and cannot fail.
    if unsafe { libc::getppid() } == 1 {
        return true;
    }
    let mut at = pid;
    // A chain of parents ends at 1 (or 0), and is never longer than the processes there are.
    for _ in 0..100_000 {
        match parent_of(at) {
            Some(p) if p == me => return true,
            Some(p) if p > 1 => at = p,
            _ => return false,
        }
    }
    false
}

/// The parent of `pid`, from `/proc/PID/stat` (readable for every process): the field
/// after the state, which follows the last `)` of the command name.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// One holder: its executable, its loader variables and its code from writable places.
fn holder(pid: i32, places: &Places) -> Holder {
    let program = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    let environ = std::fs::read(format!("/proc/{pid}/environ"));
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"));
    let unread = match (&environ, &maps) {
        (Err(e), _) => Some(format!("its environment (/proc/{pid}/environ): {e}")),
        (_, Err(e)) => Some(format!("its mapped files (/proc/{pid}/maps): {e}")),
        _ => None,
    };
    Holder {
        pid,
        program,
        loader: environ.map(|e| loader_vars(&e)).unwrap_or_default(),
        writable_code: maps
            .map(|m| {
                code_files(&m)
                    .into_iter()
                    .filter(|f| places.writable(f))
                    .collect()
            })
            .unwrap_or_default(),
        unread,
    }
}

/// The loader variables set (not empty) in an environment block (`NAME=value\0…`).
fn loader_vars(environ: &[u8]) -> Vec<String> {
    environ
        .split(|b| *b == 0)
        .filter_map(|var| {
            let var = String::from_utf8_lossy(var);
            let (name, value) = var.split_once('=')?;
            (LOADER_VARS.contains(&name) && !value.is_empty()).then(|| {
                let value: String = value.chars().take(SHOWN_VALUE).collect();
                format!("{name}={value}")
            })
        })
        .collect()
}

/// The files a process runs code from: the file-backed mappings with execute permission,
/// each once, in the order of the maps (`ADDR PERMS OFFSET DEV INODE PATH`; the path may
/// hold spaces). Data a program maps (git's packs and index) is not code and not listed.
fn code_files(maps: &str) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for line in maps.lines() {
        let mut fields = line.splitn(6, ' ');
        let perms = fields.nth(1).unwrap_or_default();
        let path = fields.nth(3).unwrap_or_default().trim_start();
        if perms.as_bytes().get(2) == Some(&b'x')
            && path.starts_with('/')
            && !files.iter().any(|f| f == path)
        {
            files.push(path.to_string());
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_loader_variables_count() {
        let env = b"PATH=/usr/bin\0LD_PRELOAD=/wt/evil.so\0LD_BIND_NOW=1\0LD_AUDIT=\0NOT_LD_PRELOAD=x\0LD_LIBRARY_PATH=/tmp/lib\0";
        assert_eq!(
            loader_vars(env),
            vec!["LD_PRELOAD=/wt/evil.so", "LD_LIBRARY_PATH=/tmp/lib"]
        );
        let long = format!("LD_AUDIT={}\0", "a".repeat(1000));
        assert_eq!(
            loader_vars(long.as_bytes())[0].len(),
            "LD_AUDIT=".len() + 200
        );
    }

    #[test]
    fn only_executable_file_mappings_are_code() {
        let maps = "\
55d0c0000000-55d0c0010000 r--p 00000000 08:01 100 /usr/bin/git
55d0c0010000-55d0c0100000 r-xp 00010000 08:01 100 /usr/bin/git
7f0000000000-7f0000001000 r--s 00000000 08:01 200 /wt/.git/objects/pack/pack-1.pack
7f0000001000-7f0000002000 r-xp 00001000 08:01 300 /wt/my lib.so
7f0000002000-7f0000003000 r-xp 00002000 08:01 300 /wt/my lib.so
7f0000003000-7f0000004000 r-xp 00000000 00:01 400 /memfd:x (deleted)
7f0000004000-7f0000005000 rwxp 00000000 00:00 0 
7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0                          [vdso]
";
        assert_eq!(
            code_files(maps),
            vec!["/usr/bin/git", "/wt/my lib.so", "/memfd:x (deleted)"]
        );
    }

    #[test]
    fn writable_places_are_roots_temp_dirs_and_what_no_system_dir_covers() {
        let wt = tempfile::tempdir().unwrap();
        let places = Places::new([wt.path().to_path_buf()]);
        let inside = wt.path().canonicalize().unwrap().join("lib.so");
        assert!(places.writable(inside.to_str().unwrap()));
        assert!(places.writable("/tmp/x/libz.so.1"));
        assert!(places.writable("/tmp/gone.so (deleted)"));
        assert!(places.writable("/dev/shm/x.so"));
        assert!(places.writable("/memfd:x (deleted)"));
        assert!(!places.writable("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(!places.writable("/usr/lib/gone.so (deleted)"));
        // A writable root beneath a system directory is still writable.
        let under_usr = Places::new([PathBuf::from("/usr/local/src/project")]);
        assert!(under_usr.writable("/usr/local/src/project/lib.so"));
    }

    /// A real child with a loader variable and a copy of a system library mapped from a
    /// temp directory: both are reported, and its executable is named.
    #[test]
    fn a_real_process_is_seen_with_its_loader_variables_and_writable_code() {
        use std::os::unix::net::UnixStream;
        let dir = tempfile::tempdir_in("/tmp").unwrap();
        let lib_copy = dir.path().join("libcopy.so");
        // libm: a library the shell does not use, so the copy is loaded beside the rest.
        let libm = [
            "/lib/x86_64-linux-gnu/libm.so.6",
            "/lib/aarch64-linux-gnu/libm.so.6",
        ]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("the system's libm");
        std::fs::copy(libm, &lib_copy).unwrap();
        let (mine, theirs) = UnixStream::pair().unwrap();
        let inode = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&theirs)
            ))
            .unwrap()
            .ino()
        };
        // This process keeps a second descriptor of it: two holders.
        let kept = theirs.try_clone().unwrap();
        // The child inherits the socket as its standard input and waits on it.
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "read _"])
            .env_clear()
            .env("LD_PRELOAD", &lib_copy)
            .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                theirs,
            )))
            .spawn()
            .unwrap();
        // Until the child has loaded the copy.
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap_or_default()
            .contains("libcopy.so")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never loaded it"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let found = holders_of(inode, &Places::new([]));
        drop((mine, kept));
        let _ = child.wait();
        let child_holder = found
            .iter()
            .find(|h| h.pid == pid)
            .expect("the child holds it");
        // `/bin/sh` is a link; the executable is the file it names.
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        assert_eq!(child_holder.program.as_deref(), sh.to_str(), "{found:?}");
        assert_eq!(
            child_holder.loader,
            vec![format!("LD_PRELOAD={}", lib_copy.display())]
        );
        assert_eq!(
            child_holder.writable_code,
            vec![lib_copy.canonicalize().unwrap().display().to_string()]
        );
        assert!(child_holder.unread.is_none());
        // Both holders, this process too (with nothing to report of its own code); the
        // other end of the pair, which only this process holds, is another socket.
        let me = std::process::id() as i32;
        assert!(found.iter().any(|h| h.pid == me), "{found:?}");
        assert_eq!(found.len(), 2, "{found:?}");
    }

    /// What finding a connection's holders costs: the walk of `/proc` each new connection
    /// waits for when a `programs` entry exists, here among every process of the machine
    /// (a sandbox has a handful). docs/NETWORK.md quotes what it prints:
    /// `cargo test -p runner-sandbox-server holders_cost -- --ignored --nocapture`
    #[test]
    #[ignore = "a measurement: run it on its own, it prints the numbers"]
    fn holders_cost() {
        use std::os::unix::fs::MetadataExt;
        let (mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&theirs);
        let inode = std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .ino();
        let places = Places::new([]);
        let processes = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .count();
        let runs = 50;
        let start = std::time::Instant::now();
        for _ in 0..runs {
            assert_eq!(holders_of(inode, &places).len(), 1);
        }
        let each = start.elapsed().as_secs_f64() * 1e3 / f64::from(runs);
        println!("holders of one socket among {processes} processes: {each:.2} ms per lookup");
        drop((mine, theirs));
    }
}
