//! Escape attacks against the `docker` backend: the server as the main process of a
//! hardened container (no network, no capabilities, no-new-privileges, read-only root,
//! tmpfs /tmp, memory and pids limits, only the worktree mounted, `.git/hooks` and
//! `.git/config` read-only).
//!
//! The attack table lives in `common/escape.rs` (shared with the landlock suite); each group
//! (one test each, from `escape_suite!`) runs its whole table and lists every attack that
//! got through. No attack is a known hole today (`holes: &[]`).
//! The last test runs the server in an image that holds nothing but a static busybox (it
//! installs Debian's busybox-static first when /bin/busybox is missing or not static).

use common::Backend;
use common::escape;

const BACKEND: Backend = Backend::Docker;

common::escape_suite!(BACKEND, holes: &[]);

/// An image holding only a static busybox: no libc, no bash. The static server must serve
/// there, running commands with `/bin/sh`.
#[tokio::test(flavor = "multi_thread")]
async fn server_runs_in_a_busybox_only_image() {
    const IMAGE: &str = "runner-test-busybox";
    const BUSYBOX: &str = "/bin/busybox";
    // Debian's `busybox` package also installs a /bin/busybox, linked against libc: only
    // busybox-static's runs in the image (installing it replaces the other).
    common::engine::ensure_package_for("busybox-static", "a static /bin/busybox", || {
        std::fs::read(BUSYBOX).is_ok_and(|elf| is_static_elf(&elf))
    });
    common::engine::docker();
    let busybox = std::fs::read(BUSYBOX).expect("/bin/busybox (busybox-static)");
    let mut tar = tar::Builder::new(Vec::new());
    let mut dir = |path: &str| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        tar.append_data(&mut h, path, std::io::empty()).unwrap();
    };
    for d in ["bin/", "tmp/", "etc/"] {
        dir(d);
    }
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o755);
    h.set_size(busybox.len() as u64);
    tar.append_data(&mut h, "bin/busybox", busybox.as_slice())
        .unwrap();
    for applet in [
        "sh", "ls", "echo", "cat", "mkdir", "rm", "env", "id", "uname",
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        tar.append_link(&mut h, format!("bin/{applet}"), "busybox")
            .unwrap();
    }
    let bytes = tar.into_inner().unwrap();

    common::engine::import_image(IMAGE, bytes).await;

    let lab = escape::Lab::new(BACKEND);
    let mut spec = lab.spec(runner_sandbox::spec::Limits::default());
    spec.docker.image = format!("{IMAGE}:latest");
    let sb = lab.open_spec(&spec).await;
    let (code, stdout, stderr, timed_out) = escape::run(
        &sb,
        "echo hello; ls /; [ -e /bin/bash ] || echo no-bash; [ -e /lib ] || echo no-libc",
    )
    .await;
    assert_eq!(code, Some(0), "stdout {stdout:?} stderr {stderr:?}");
    assert!(!timed_out);
    assert!(stdout.starts_with("hello\n"), "{stdout:?}");
    for entry in ["bin", "etc", "opt", "proc", "tmp"] {
        assert!(
            stdout.lines().any(|l| l == entry),
            "ls / lacks {entry}: {stdout:?}"
        );
    }
    assert!(
        stdout.contains("no-bash\n") && stdout.contains("no-libc\n"),
        "{stdout:?}"
    );
    // The file tools work there too.
    sb.client
        .write(
            &sb.worktree.join("bb.txt"),
            b"from busybox\n".to_vec(),
            None,
        )
        .await
        .expect("write through the server");
    assert_eq!(
        std::fs::read_to_string(lab.wt.join("bb.txt")).unwrap(),
        "from busybox\n"
    );
    eprintln!("escape[docker busybox]: the static server served in an image with only busybox");
}

/// Whether `elf` is an ELF executable without a program interpreter (`PT_INTERP`), i.e. one
/// that runs without a dynamic loader or libc beside it. `false` when it is not ELF.
fn is_static_elf(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" {
        return false;
    }
    let little = match elf[5] {
        1 => true,
        2 => false,
        _ => return false,
    };
    let uint = |at: usize, len: usize| -> Option<u64> {
        let bytes = elf.get(at..at + len)?;
        let fold = |acc: u64, &b: &u8| (acc << 8) | u64::from(b);
        Some(if little {
            bytes.iter().rev().fold(0, fold)
        } else {
            bytes.iter().fold(0, fold)
        })
    };
    // (e_phoff, its size, e_phentsize, e_phnum) for ELFCLASS32 and ELFCLASS64.
    let (phoff, phentsize, phnum) = match elf[4] {
        1 => (uint(0x1c, 4), uint(0x2a, 2), uint(0x2c, 2)),
        2 => (uint(0x20, 8), uint(0x36, 2), uint(0x38, 2)),
        _ => return false,
    };
    let (Some(phoff), Some(phentsize), Some(phnum)) = (phoff, phentsize, phnum) else {
        return false;
    };
    (0..phnum).all(|i| {
        let at = (phoff + i * phentsize) as usize;
        uint(at, 4).is_some_and(|p_type| p_type as u32 != PT_INTERP)
    })
}

/// The check that decides whether busybox-static must be installed.
#[test]
fn static_elf_check_reads_the_program_headers() {
    // A minimal little-endian ELF64 header with one program header of the given type.
    let elf = |p_type: u32| {
        let mut e = vec![0u8; 64 + 56];
        e[..4].copy_from_slice(b"\x7fELF");
        e[4] = 2; // ELFCLASS64
        e[5] = 1; // little-endian
        e[0x20] = 64; // e_phoff
        e[0x36] = 56; // e_phentsize
        e[0x38] = 1; // e_phnum
        e[64..68].copy_from_slice(&p_type.to_le_bytes());
        e
    };
    assert!(is_static_elf(&elf(1)), "PT_LOAD only");
    assert!(!is_static_elf(&elf(3)), "PT_INTERP");
    assert!(!is_static_elf(b"#!/bin/sh\necho not elf\n"));
    let mut truncated = elf(1);
    truncated.truncate(66);
    assert!(!is_static_elf(&truncated));
    // This test binary is static-pie (`.cargo/config.toml`): a PT_DYNAMIC but no PT_INTERP.
    let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    assert!(is_static_elf(&me));
}
