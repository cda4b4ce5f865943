//! `runner-edit`: the engine behind the `edit` and `multiedit` tools, a port of
//! OpenCode's cascade of replacers that finds the model's `oldString` in a file
//! even when its copy differs in whitespace, indentation or escaping, and refuses
//! a match that is not recognisably the block the model meant.
//!
//! * [`replace`]: one replacement in a text ([`replace::replace`]), with the
//!   guards that keep a fuzzy match from landing on the wrong code;
//! * [`replacers`]: the nine candidate generators, tried in order;
//! * [`text`]: line endings, the byte-order mark, and the JavaScript string
//!   primitives the port has to reproduce to accept and refuse what OpenCode does.
//!
//! Why a crate of its own: this is pure text, strings in and strings out. It
//! imports nothing of runner (no sandbox, no permission gate, no async runtime,
//! no dependency beyond std), so it is tested and benchmarked (`cargo bench -p
//! runner-edit --bench edit`) without building the tools, and whatever wants to
//! fuzz it links it alone. The tools in runner-tool read the file through the
//! wall, ask for permission, call [`replace::replace`] and write the result.

pub mod replace;
pub mod replacers;
pub mod text;
