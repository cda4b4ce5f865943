//! Escape attacks against the `docker` backend: the server as the main process of a
//! hardened container (no network, no capabilities, no-new-privileges, read-only root,
//! tmpfs /tmp, memory and pids limits, only the worktree mounted, `.git/hooks` and
//! `.git/config` read-only).
//!
//! The attack table lives in `common/escape.rs` (shared with the landlock suite); each group
//! (one test each, from `escape_suite!`) runs its whole table and lists every attack that
//! got through. No attack is a known hole today (`holes: &[]`).
//! The last test runs the server in an image that holds nothing but a static busybox.

mod common;

use common::Backend;
use common::escape;

const BACKEND: Backend = Backend::Docker;

escape::escape_suite!(BACKEND, holes: &[]);

/// An image holding only a static busybox: no libc, no bash. The static server must serve
/// there, running commands with `/bin/sh`.
#[tokio::test(flavor = "multi_thread")]
async fn server_runs_in_a_busybox_only_image() {
    use bollard::query_parameters::CreateImageOptionsBuilder;
    use futures_util::StreamExt;

    const IMAGE: &str = "runner-test-busybox";
    common::engine::docker();
    let busybox = std::fs::read("/bin/busybox").expect("/bin/busybox (busybox-static)");
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

    let docker = bollard::Docker::connect_with_defaults()
        .unwrap()
        .negotiate_version()
        .await
        .unwrap();
    let mut stream = docker.create_image(
        Some(
            CreateImageOptionsBuilder::new()
                .from_src("-")
                .repo(IMAGE)
                .tag("latest")
                .build(),
        ),
        Some(bollard::body_full(bytes.into())),
        None,
    );
    while let Some(item) = stream.next().await {
        item.expect("docker import of the busybox image");
    }

    let lab = escape::Lab::new(BACKEND);
    let mut spec = lab.spec(runner::sandbox::spec::Limits::default());
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
