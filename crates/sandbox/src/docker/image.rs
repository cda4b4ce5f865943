//! Building sandbox images without assuming a registry: the Dockerfile and its package list
//! are compiled into runner; the base is pulled if a registry answers, and otherwise built
//! from Debian packages with `mmdebstrap` and imported (`docker import`).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{BuildImageOptionsBuilder, CreateImageOptionsBuilder};
use futures_util::StreamExt;

use super::DockerError;

/// A built-in image recipe (`images/NAME/`): its Dockerfile and package list, compiled in.
pub struct Recipe {
    pub name: &'static str,
    pub dockerfile: &'static str,
    /// Its own packages; those of the recipe it `extends` come first.
    pub packages: &'static str,
    pub extends: Option<&'static str>,
    /// The tag it builds and the base it starts from, unless told otherwise.
    pub tag: &'static str,
    pub base: &'static str,
}

pub const RECIPES: &[Recipe] = &[
    Recipe {
        name: "default",
        dockerfile: include_str!("../../../../images/default/Dockerfile"),
        packages: include_str!("../../../../images/default/packages.txt"),
        extends: None,
        tag: crate::spec::DEFAULT_IMAGE,
        base: DEFAULT_BASE,
    },
    Recipe {
        name: "dev",
        // The same steps; only the packages differ.
        dockerfile: include_str!("../../../../images/default/Dockerfile"),
        packages: include_str!("../../../../images/dev/packages.txt"),
        extends: Some("default"),
        tag: DEV_IMAGE,
        base: "runner-base:bookworm-dev",
    },
];

/// The image of the `dev` recipe: the default one plus language servers and Node.js.
pub const DEV_IMAGE: &str = "runner-sandbox:bookworm-dev";

/// The base `runner image build` starts from unless told otherwise. It is a local name: no
/// registry has it, so it is always made with mmdebstrap unless it already exists.
pub const DEFAULT_BASE: &str = "runner-base:bookworm";
pub const DEFAULT_SUITE: &str = "bookworm";

impl Recipe {
    /// The recipe named `name`, or an error listing the ones there are.
    pub fn named(name: &str) -> Result<&'static Recipe, DockerError> {
        RECIPES.iter().find(|r| r.name == name).ok_or_else(|| {
            let known: Vec<&str> = RECIPES.iter().map(|r| r.name).collect();
            DockerError::Unexpected(format!(
                "no image recipe named {name:?}; known: {}",
                known.join(", ")
            ))
        })
    }

    /// Every package of the image: the extended recipe's, then its own.
    pub fn all_packages(&self) -> Vec<&'static str> {
        let mut all = match self.extends.and_then(|e| Recipe::named(e).ok()) {
            Some(parent) => parent.all_packages(),
            None => Vec::new(),
        };
        all.extend(packages(self.packages));
        all
    }
}

#[derive(Debug, Clone)]
pub struct BuildRequest {
    pub recipe: String,
    /// The tag to build; `None`: the recipe's.
    pub tag: Option<String>,
    /// The base to start from; `None`: the recipe's.
    pub base: Option<String>,
    pub suite: String,
    /// Rebuild the base even if it exists.
    pub fresh_base: bool,
}

pub fn packages(list: &'static str) -> Vec<&'static str> {
    list.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

pub async fn exists(docker: &Docker, name: &str) -> bool {
    docker.inspect_image(name).await.is_ok()
}

/// The full name the engine gives the image `name`: `name` itself on Docker, and on Podman,
/// which files local images under `localhost/` (or an import under `docker.io/library/`),
/// that longer name. Podman's Docker-compatible build resolves a short `FROM` name on
/// docker.io alone and pulls it, so the build is given this one. `None`: no such image.
pub async fn full_name(docker: &Docker, name: &str) -> Option<String> {
    let image = docker.inspect_image(name).await.ok()?;
    let tags = image.repo_tags.unwrap_or_default();
    let suffix = format!("/{name}");
    tags.iter()
        .find(|t| *t == name)
        .or_else(|| tags.iter().find(|t| t.ends_with(&suffix)))
        .cloned()
        .or(image.id)
}

/// Builds the recipe's image (`req.tag`, else the recipe's); `log` gets progress lines.
pub async fn build(
    docker: &Docker,
    req: &BuildRequest,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), DockerError> {
    let recipe = Recipe::named(&req.recipe)?;
    let tag = req.tag.as_deref().unwrap_or(recipe.tag);
    let base = req.base.as_deref().unwrap_or(recipe.base);
    let all = recipe.all_packages();
    ensure_base(docker, req, base, &all, log).await?;
    let context = context_tar(recipe.dockerfile, &all.join("\n"))
        .map_err(|e| DockerError::Unexpected(format!("cannot pack the build context: {e}")))?;
    let base = full_name(docker, base)
        .await
        .ok_or_else(|| DockerError::Unexpected(format!("the base {base} is not on the engine")))?;
    let opts = BuildImageOptionsBuilder::new()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .buildargs(&HashMap::from([("BASE", base.as_str())]))
        .labels(&HashMap::from([("runner.image", recipe.name)]))
        .build();
    let mut stream = docker.build_image(opts, None, Some(bollard::body_full(context.into())));
    while let Some(item) = stream.next().await {
        let info = item.map_err(DockerError::engine(format!("building {tag} failed")))?;
        if let Some(line) = info.stream {
            let line = line.trim_end();
            if !line.is_empty() {
                log(line);
            }
        }
    }
    if !exists(docker, tag).await {
        return Err(DockerError::Unexpected(format!(
            "the build ended but {tag} does not exist"
        )));
    }
    Ok(())
}

/// The base the Dockerfile starts from: there already (unless `fresh_base`), pulled, or
/// made from `packages` with mmdebstrap.
async fn ensure_base(
    docker: &Docker,
    req: &BuildRequest,
    base: &str,
    packages: &[&str],
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), DockerError> {
    if !req.fresh_base && exists(docker, base).await {
        log(&format!("base {base} exists"));
        return Ok(());
    }
    if !req.fresh_base && try_pull(docker, base, log).await {
        log(&format!("pulled {base}"));
        return Ok(());
    }
    build_base(docker, base, &req.suite, packages, log).await
}

fn context_tar(dockerfile: &str, packages: &str) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, body) in [("Dockerfile", dockerfile), ("packages.txt", packages)] {
        let mut header = tar::Header::new_gnu();
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, name, body.as_bytes())?;
    }
    tar.into_inner()
}

/// A pull that gives up quickly: on a machine without a registry it fails at once or hangs
/// on DNS, and either way the local build is the answer.
async fn try_pull(docker: &Docker, image: &str, log: &mut (dyn FnMut(&str) + Send)) -> bool {
    let (repo, tag) = image.rsplit_once(':').unwrap_or((image, "latest"));
    let opts = CreateImageOptionsBuilder::new()
        .from_image(repo)
        .tag(tag)
        .build();
    let pull = async {
        let mut stream = docker.create_image(Some(opts), None, None);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                log(&format!("cannot pull {image}: {e}"));
                return false;
            }
        }
        true
    };
    tokio::time::timeout(Duration::from_secs(20), pull)
        .await
        .unwrap_or(false)
}

/// `mmdebstrap --variant=minbase --include=PACKAGES SUITE out.tar` with the host's apt
/// sources, then `docker import` of the tar as `name`.
pub async fn build_base(
    docker: &Docker,
    name: &str,
    suite: &str,
    packages: &[&str],
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), DockerError> {
    if which("mmdebstrap").is_none() {
        return Err(DockerError::Program(format!(
            "the base image {name} is missing and cannot be pulled, and mmdebstrap is not \
             installed to build it: `apt-get install mmdebstrap`, or pass --base with an image \
             the engine has"
        )));
    }
    let dir = tempfile::Builder::new()
        .prefix("runner-base-")
        .tempdir()
        .map_err(DockerError::io(
            "make a temp directory for the base image in",
            &std::env::temp_dir(),
        ))?;
    let out = dir.path().join("rootfs.tar");
    let mut cmd = tokio::process::Command::new("mmdebstrap");
    cmd.arg("--variant=minbase")
        .arg(format!("--include={}", packages.join(",")))
        .arg("--quiet")
        .arg(suite)
        .arg(&out);
    // The host's own apt sources reach a mirror when nothing else does.
    for sources in host_sources() {
        cmd.arg(sources);
    }
    log(&format!(
        "building base {name} with mmdebstrap ({suite}, {} packages)",
        packages.len()
    ));
    let status = cmd
        .status()
        .await
        .map_err(DockerError::io("run", Path::new("mmdebstrap")))?;
    if !status.success() {
        return Err(DockerError::Program(format!(
            "mmdebstrap failed ({status}); its output is above"
        )));
    }
    let (repo, tag) = name.rsplit_once(':').unwrap_or((name, "latest"));
    let file = tokio::fs::File::open(&out)
        .await
        .map_err(DockerError::io("open", &out))?;
    let body = bollard::body_try_stream(tokio_util::io::ReaderStream::new(file));
    let opts = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(repo)
        .tag(tag)
        .build();
    let mut stream = docker.create_image(Some(opts), Some(body), None);
    while let Some(item) = stream.next().await {
        item.map_err(DockerError::engine("docker import of the base failed"))?;
    }
    name_import(docker, repo, tag).await?;
    log(&format!("imported base {name}"));
    Ok(())
}

/// Makes sure an import answers to `repo:tag`. Podman 4's Docker-compatible import ignores
/// the tag and names the image `repo:latest`; that name is then moved to the tag asked for.
async fn name_import(docker: &Docker, repo: &str, tag: &str) -> Result<(), DockerError> {
    let name = format!("{repo}:{tag}");
    if exists(docker, &name).await {
        return Ok(());
    }
    let imported = format!("{repo}:latest");
    let opts = bollard::query_parameters::TagImageOptionsBuilder::new()
        .repo(repo)
        .tag(tag)
        .build();
    docker
        .tag_image(&imported, Some(opts))
        .await
        .map_err(DockerError::engine(format!(
            "cannot name the imported base {name} (it came in as {imported})"
        )))?;
    let untag = bollard::query_parameters::RemoveImageOptionsBuilder::new().build();
    let _ = docker.remove_image(&imported, Some(untag), None).await;
    if exists(docker, &name).await {
        Ok(())
    } else {
        Err(DockerError::Unexpected(format!(
            "the imported base does not answer to {name}"
        )))
    }
}

fn host_sources() -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let list = Path::new("/etc/apt/sources.list");
    if std::fs::metadata(list).is_ok_and(|m| m.len() > 0) {
        out.push(list.to_path_buf());
    }
    if let Ok(entries) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut files: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "sources" || e == "list"))
            .collect();
        files.sort();
        out.extend(files);
    }
    out
}

pub fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}
