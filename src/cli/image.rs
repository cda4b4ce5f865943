//! `runner image build [NAME]`: builds a sandbox image through the Engine API, making its
//! Debian base locally when no registry can provide it.

use clap::{Args, Subcommand};

use super::exit;
use crate::sandbox::docker::{engine, image};
use crate::sandbox::spec::DEFAULT_IMAGE;

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build a sandbox image from a built-in recipe (`default`).
    Build(BuildArgs),
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The recipe (images/NAME/Dockerfile).
    #[arg(default_value = "default")]
    recipe: String,
    /// The tag to build.
    #[arg(long, default_value = DEFAULT_IMAGE)]
    tag: String,
    /// The base image; made with mmdebstrap + docker import when missing and unpullable.
    #[arg(long, default_value = image::DEFAULT_BASE)]
    base: String,
    /// The Debian suite of a locally made base.
    #[arg(long, default_value = image::DEFAULT_SUITE)]
    suite: String,
    /// Rebuild the base even if the engine has it.
    #[arg(long)]
    fresh_base: bool,
    /// Do nothing when the tag already exists.
    #[arg(long)]
    if_missing: bool,
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
    if args.if_missing && image::exists(&docker, &args.tag).await {
        eprintln!("runner: {} exists", args.tag);
        return exit::OK;
    }
    let req = image::BuildRequest {
        recipe: args.recipe,
        tag: args.tag.clone(),
        base: args.base,
        suite: args.suite,
        fresh_base: args.fresh_base,
    };
    let started = std::time::Instant::now();
    // A build prints what its commands print.
    let mut log = |line: &str| eprintln!("  {}", crate::display::escape(line));
    match image::build(&docker, &req, &mut log).await {
        Ok(()) => {
            eprintln!(
                "runner: built {} in {:.1} s",
                args.tag,
                started.elapsed().as_secs_f64()
            );
            exit::OK
        }
        Err(e) => {
            eprintln!("runner: {e}");
            exit::FAILED
        }
    }
}
