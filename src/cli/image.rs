//! `runner image build [NAME]`: builds a sandbox image through the Engine API, making its
//! Debian base locally when no registry can provide it.

use clap::{Args, Subcommand};

use super::exit;
use runner_sandbox::docker::{engine, image};

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build a sandbox image from a built-in recipe: `default`, or `dev` (the default plus
    /// language servers and Node.js).
    Build(BuildArgs),
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The recipe (images/NAME/Dockerfile): default or dev.
    #[arg(default_value = "default")]
    recipe: String,
    /// The tag to build (default: the recipe's, runner-sandbox:bookworm for default and
    /// runner-sandbox:bookworm-dev for dev).
    #[arg(long)]
    tag: Option<String>,
    /// The base image; made with mmdebstrap + docker import when missing and unpullable
    /// (default: the recipe's, runner-base:bookworm or runner-base:bookworm-dev).
    #[arg(long)]
    base: Option<String>,
    /// The Debian suite of a locally made base.
    #[arg(long, default_value = image::DEFAULT_SUITE)]
    suite: String,
    /// Rebuild the base even if the engine has it.
    #[arg(long)]
    fresh_base: bool,
    /// Do nothing when the tag already exists.
    #[arg(long)]
    if_missing: bool,
    /// One JSON object on stdout when done: {"tag", "id", "built" (false when
    /// --if-missing found it), "seconds"}; the build's own lines stay on stderr.
    #[arg(long)]
    json: bool,
}

pub async fn run(cmd: ImageCommand) -> u8 {
    let ImageCommand::Build(args) = cmd;
    let docker = match engine::connect().await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("runner: {e}");
            return exit::FAILED;
        }
    };
    let recipe = match image::Recipe::named(&args.recipe) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("runner: {e}");
            return exit::USAGE;
        }
    };
    let tag = args.tag.clone().unwrap_or_else(|| recipe.tag.to_string());
    let started = std::time::Instant::now();
    if args.if_missing && image::exists(&docker, &tag).await {
        eprintln!("runner: {tag} exists");
        return report(&docker, &tag, false, started, args.json).await;
    }
    let req = image::BuildRequest {
        recipe: args.recipe,
        tag: args.tag,
        base: args.base,
        suite: args.suite,
        fresh_base: args.fresh_base,
    };
    // A build prints what its commands print.
    let mut log = |line: &str| eprintln!("  {}", runner_display::escape(line));
    match image::build(&docker, &req, &mut log).await {
        Ok(()) => {
            eprintln!(
                "runner: built {tag} in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            report(&docker, &tag, true, started, args.json).await
        }
        Err(e) => {
            eprintln!("runner: {e}");
            exit::FAILED
        }
    }
}

/// Under `--json`, the image as the engine now has it: the tag asked for and the id it
/// names, so a script can pin the exact image it just made.
async fn report(
    docker: &bollard::Docker,
    tag: &str,
    built: bool,
    started: std::time::Instant,
    json: bool,
) -> u8 {
    if !json {
        return exit::OK;
    }
    let id = match docker.inspect_image(tag).await {
        Ok(i) => i.id,
        Err(e) => {
            eprintln!("runner: {tag} was built but the engine cannot show it: {e}");
            return exit::FAILED;
        }
    };
    println!(
        "{}",
        runner_display::json(&serde_json::json!({
            "tag": tag,
            "id": id,
            "built": built,
            "seconds": started.elapsed().as_secs_f64(),
        }))
    );
    exit::OK
}
