//! Configuration files: today the profiles (see `profiles/README.md`).

pub mod profile;
