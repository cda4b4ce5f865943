//! Path arguments: which directories a command's paths and redirections may reach, through
//! `cd` sequences, `~`, globs and symlinks, and whether they leave the worktree.

use super::*;

impl<'a> Scanner<'a> {
    /// Checks every path argument of a path-taking command.
    pub(super) fn path_args(&mut self, name: &str, args: &[Node], src: &str) {
        let plus_is_flag = basename(name) == "chmod";
        let mut dashdash = false;
        for &arg in args {
            if let Arg::Value(word) = classify(arg, src, &mut dashdash, plus_is_flag) {
                self.judge_arg(word);
            }
        }
    }

    /// `cd`, `pushd`, `popd`, `chdir`: check the target and add it to the directory set.
    pub(super) fn change_dir(&mut self, name: &str, args: &[Node], src: &str) {
        if name == "popd" {
            // popd only returns to directories already in the set.
            return;
        }
        let mut dashdash = false;
        let mut targets = 0;
        for &arg in args {
            let word = static_word(arg, src);
            if !dashdash && name != "pushd" && word.as_ref().is_some_and(|w| w.text == "-") {
                // `cd -` goes to $OLDPWD, which may have been set anywhere.
                targets += 1;
                self.anywhere();
                self.set_unknown();
                continue;
            }
            if let Arg::Value(word) = classify(arg, src, &mut dashdash, name == "pushd") {
                targets += 1;
                self.enter(word);
            }
        }
        if targets == 0 && name != "pushd" {
            let home = self.home.clone().map(|h| Word {
                text: h,
                glob: None,
                tilde: false,
            });
            self.enter(home);
        }
    }

    /// One `cd` target: where it is, and that the shell may now be there.
    pub(super) fn enter(&mut self, word: Option<Word>) {
        match self.judge_dir(word) {
            Some(dirs) => dirs.into_iter().for_each(|d| self.add_dir(d)),
            None => self.set_unknown(),
        }
    }

    /// Checks a directory the shell or a command enters; returns where that may be, `None`
    /// when only known at run time.
    pub(super) fn judge_dir(&mut self, word: Option<Word>) -> Option<Vec<PathBuf>> {
        let Some(word) = word.and_then(|w| self.expand_tilde(w)) else {
            self.anywhere();
            return None;
        };
        if let Some(at) = word.glob {
            self.judge_glob(&word.text, at);
            return None;
        }
        let Some(places) = self.candidates(&word.text) else {
            self.anywhere();
            return None;
        };
        let mut dirs = Vec::new();
        for place in places {
            // bash's `cd` is logical (`link/..` is where you started) while the kernel is
            // physical; the shell may end up in either, so both count.
            for dir in [resolve(&place), lexical(&place)] {
                self.judge_place(&dir, true);
                dirs.push(dir);
            }
        }
        Some(dirs)
    }

    pub(super) fn add_dir(&mut self, dir: PathBuf) {
        let Dirs::Known(dirs) = &mut self.dirs else {
            return;
        };
        if dirs.contains(&dir) {
            return;
        }
        if dirs.len() >= MAX_DIRS {
            return self.set_unknown();
        }
        dirs.push(dir);
        self.changes += 1;
    }

    pub(super) fn set_unknown(&mut self) {
        if self.dirs != Dirs::Unknown {
            self.dirs = Dirs::Unknown;
            self.changes += 1;
        }
    }

    pub(super) fn anywhere(&mut self) {
        self.external.push("*");
    }

    /// A path argument or redirect target (`None` = only known at run time).
    pub(super) fn judge_arg(&mut self, word: Option<Word>) {
        let Some(word) = word.and_then(|w| self.expand_tilde(w)) else {
            return self.anywhere();
        };
        match word.glob {
            Some(at) => self.judge_glob(&word.text, at),
            None => match self.candidates(&word.text) {
                Some(places) => {
                    for place in places {
                        if !harmless_device(&lexical(&place)) {
                            self.judge_place(&resolve(&place), false);
                        }
                    }
                }
                None => self.anywhere(),
            },
        }
    }

    /// A glob matches things below its static directory prefix, unless a `..` (or a brace
    /// alternative starting a new absolute path) lets it climb out; then it could be anywhere.
    pub(super) fn judge_glob(&mut self, text: &str, at: usize) {
        let cut = text[..at].rfind('/').map_or(0, |i| i + 1);
        let (prefix, rest) = text.split_at(cut);
        let climbs = rest.split(['/', '{', ',', '}']).any(|piece| {
            [".*", ".?", ".[", ".."]
                .iter()
                .any(|p| piece.starts_with(p))
        });
        let rebases = prefix.is_empty() && rest.starts_with('{') && rest.contains(['/', '~']);
        if climbs || rebases {
            return self.anywhere();
        }
        let dir = if prefix.is_empty() { "." } else { prefix };
        match self.candidates(dir) {
            Some(places) => places
                .iter()
                .for_each(|p| self.judge_place(&resolve(p), true)),
            None => self.anywhere(),
        }
    }

    /// Asks for `<dir>/*` when a resolved place is outside the worktree. A directory stands
    /// for itself; a file (or something not yet created) for the directory holding it.
    pub(super) fn judge_place(&mut self, real: &Path, as_dir: bool) {
        if self.inside(real) {
            return;
        }
        let dir = if as_dir || real.is_dir() {
            real
        } else {
            real.parent().unwrap_or(real)
        };
        let dir = dir.to_string_lossy();
        let dir = dir.trim_end_matches('/');
        self.external.push(&format!("{dir}/*"));
    }

    pub(super) fn inside(&self, real: &Path) -> bool {
        real.starts_with(self.cx.worktree) || real.starts_with(&self.worktree_real)
    }

    /// The absolute paths `text` may name: itself when absolute, else one per possible
    /// directory; `None` when relative and the directory is unknown.
    pub(super) fn candidates(&self, text: &str) -> Option<Vec<PathBuf>> {
        if text.starts_with('/') {
            return Some(vec![PathBuf::from(text)]);
        }
        match &self.dirs {
            Dirs::Known(dirs) => Some(dirs.iter().map(|d| d.join(text)).collect()),
            Dirs::Unknown => None,
        }
    }

    /// Applies tilde expansion; `None` when it cannot be done statically (`~user`, no home,
    /// `HOME` reassigned).
    pub(super) fn expand_tilde(&self, word: Word) -> Option<Word> {
        if !word.tilde {
            return Some(word);
        }
        let end = word.text.find('/').unwrap_or(word.text.len());
        if end != 1 {
            return None;
        }
        let home = self.home.as_deref()?;
        Some(Word {
            text: wildcard::expand_home(&word.text, home),
            // The `~` (one byte) became `home`.
            glob: word.glob.map(|g| (g + home.len()).saturating_sub(1)),
            tilde: false,
        })
    }

    /// Worktree-relative with `/` separators when inside, absolute when outside.
    pub(super) fn display(&self, real: &Path) -> String {
        let relative = real
            .strip_prefix(self.cx.worktree)
            .or_else(|_| real.strip_prefix(&self.worktree_real));
        match relative {
            Ok(rel) => rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            Err(_) => real.to_string_lossy().into_owned(),
        }
    }

    /// `> f`, `>> f`, `< f`, `&> f`, `2> f`…: the target is a path like any argument;
    /// `>&2`, `2>&1` and `>&-` only shuffle file descriptors.
    pub(super) fn redirect(&mut self, node: Node, src: &str) {
        let mut cursor = node.walk();
        let mut op = "";
        for child in node.children(&mut cursor) {
            if !child.is_named() {
                op = child.kind();
                continue;
            }
            if child.kind() == "file_descriptor" {
                continue;
            }
            let duplicates = matches!(op, ">&" | "<&");
            if duplicates && (child.kind() == "number" || node_text(child, src) == "-") {
                continue;
            }
            let word = static_word(child, src);
            self.judge_arg(word.clone());
            if op == "<"
                && let Some(word) = word
            {
                self.env_read(word);
            }
        }
    }
}

pub(super) fn harmless_device(path: &Path) -> bool {
    let path = path.to_string_lossy();
    HARMLESS_DEVICES.contains(&path.as_ref()) || path.starts_with("/dev/fd/")
}
