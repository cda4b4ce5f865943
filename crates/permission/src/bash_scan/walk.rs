//! The walk: every statement of the parsed script, in order, with what each one runs,
//! where it runs and what it asks; loops and functions until what they change is stable.

use super::*;

impl<'a> Scanner<'a> {
    pub(super) fn new(cx: &'a ScanContext<'a>) -> Self {
        Scanner {
            cx,
            home: cx.home.and_then(Path::to_str).map(str::to_string),
            worktree_real: resolve(cx.worktree),
            dirs: Dirs::Known(vec![cx.cwd.to_path_buf()]),
            changes: 0,
            nesting: 0,
            patterns: Ordered::default(),
            always: Ordered::default(),
            external: Ordered::default(),
            reads: Ordered::default(),
            spellings: Vec::new(),
            spelling_at: HashMap::new(),
            changed_dir: false,
        }
    }

    pub(super) fn finish(self) -> BashScan {
        BashScan {
            patterns: self.patterns.items,
            always: self.always.items,
            external: self.external.items,
            reads: self.reads.items,
            deny_spellings: self
                .spellings
                .into_iter()
                .filter(|(_, forms)| !forms.items.is_empty())
                .map(|(pattern, forms)| (pattern, forms.items))
                .collect(),
        }
    }

    /// Parses and walks one script, `level` deep in the walk's recursion; false when it
    /// cannot be read reliably.
    pub(super) fn script(&mut self, src: &str, level: usize) -> bool {
        let mut parser = Parser::new();
        if parser
            .set_language(&tree_sitter_bash::LANGUAGE.into())
            .is_err()
        {
            return false;
        }
        let Some(tree) = parser.parse(src, None) else {
            return false;
        };
        let root = tree.root_node();
        if root.has_error() || level + tree_depth(root) > MAX_DEPTH {
            return false;
        }
        self.walk(root, src, level);
        self.rewalk_functions(root, src, level);
        true
    }

    /// Visits `node` and everything below it. `level` is the recursion depth, bounded by
    /// `MAX_DEPTH` through the checks in `script`.
    pub(super) fn walk(&mut self, node: Node, src: &str, level: usize) {
        self.redirected(node, src);
        match node.kind() {
            "command" => self.command(node, src, level),
            "file_redirect" => self.redirect(node, src),
            "for_statement" | "c_style_for_statement" | "while_statement" => {
                self.loop_variable(node, src);
                return self.walk_loop(node, src, level);
            }
            "function_definition" if node.child_by_field_name("redirect").is_some() => {
                // The redirection applies whenever the function runs.
                self.exact(node_text(node, src).trim());
            }
            "declaration_command" | "unset_command" => {
                self.names_cwd_var(node, src);
                self.exact(pattern_text(node, src));
            }
            "test_command" => self.exact(pattern_text(node, src)),
            "compound_statement" if is_arithmetic(node) => self.exact(pattern_text(node, src)),
            "variable_assignment" | "variable_assignments" => self.assignment(node, src),
            "expansion" => self.expansion(node, src),
            _ => {}
        }
        self.walk_children(node, src, level);
    }

    pub(super) fn walk_children(&mut self, node: Node, src: &str, level: usize) {
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            self.walk(child, src, level + 1);
        }
    }

    /// A loop body runs again after its own `cd`s, so it is walked until the directory set
    /// stops growing (`for …; do rm x; cd /tmp; done` removes `/tmp/x` the second time round).
    pub(super) fn walk_loop(&mut self, node: Node, src: &str, level: usize) {
        self.until_stable(|s| s.walk_children(node, src, level));
    }

    /// A function body runs wherever the function is called, possibly after later `cd`s, so
    /// the bodies are walked again against the final directory set.
    pub(super) fn rewalk_functions(&mut self, root: Node, src: &str, level: usize) {
        let mut bodies = Vec::new();
        each_node(root, |n, depth| {
            if n.kind() == "function_definition" {
                bodies.push((n, level + depth));
            }
        });
        if !bodies.is_empty() {
            self.until_stable(|s| {
                for &(body, at) in &bodies {
                    s.walk_children(body, src, at);
                }
            });
        }
    }

    /// Runs `pass` until it no longer changes the directory set; if it keeps changing it
    /// (`while :; do cd sub; done`), the directory becomes unknown.
    pub(super) fn until_stable(&mut self, mut pass: impl FnMut(&mut Self)) {
        for _ in 0..MAX_ROUNDS {
            let before = self.changes;
            pass(self);
            if self.changes == before {
                return;
            }
        }
        self.set_unknown();
    }

    /// Asks about a statement by its exact text, and remembers exactly that text: it is not a
    /// command with a name whose prefix could be remembered.
    pub(super) fn exact(&mut self, text: &str) {
        self.patterns.push(text);
        self.always.push(text);
    }

    /// A redirection on anything but a simple command (`{ …; } > f`, `(…) > f`, a lone
    /// `> f`) shows in no command's pattern, so the statement it applies to is asked about
    /// with it, where a `*>*` rule sees it (when the walk reaches that statement, to keep
    /// source order).
    pub(super) fn redirected(&mut self, node: Node, src: &str) {
        if REDIRECTABLE.contains(&node.kind()) && redirect_owner(node).is_some() {
            self.exact(pattern_text(node, src));
        }
        if node.kind() == "redirected_statement" && node.child_by_field_name("body").is_none() {
            self.exact(node_text(node, src).trim());
        }
    }

    /// `x=…` as a statement of its own can run code later (`x='a[$(rm y)]'; echo $((x))`) or
    /// change what later commands do (`GIT_EXTERNAL_DIFF=…`), so it is asked about exactly.
    /// Assigning `HOME`, `CDPATH` or `OLDPWD` anywhere changes what `cd` and `~` mean.
    pub(super) fn assignment(&mut self, node: Node, src: &str) {
        if node.kind() == "variable_assignment" && assigns_cwd_var(node, src) {
            self.poison_cwd();
        }
        let standalone = node
            .parent()
            .is_none_or(|p| !NOT_STATEMENT_PARENTS.contains(&p.kind()));
        if standalone {
            self.exact(pattern_text(node, src));
        }
    }

    /// `export HOME`, `declare -n CDPATH=…`, `unset HOME`: see [`Self::assignment`].
    pub(super) fn names_cwd_var(&mut self, node: Node, src: &str) {
        let mut cursor = node.walk();
        let named = node
            .named_children(&mut cursor)
            .filter(|c| matches!(c.kind(), "variable_name" | "word"))
            .any(|c| names_cwd_var(node_text(c, src)));
        if named {
            self.poison_cwd();
        }
    }

    /// `${HOME:=/etc}` assigns too.
    pub(super) fn expansion(&mut self, node: Node, src: &str) {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        let assigns = children.iter().any(|c| matches!(c.kind(), "=" | ":="));
        let cwd_var = children
            .iter()
            .any(|c| c.kind() == "variable_name" && CWD_VARS.contains(&node_text(*c, src)));
        if assigns && cwd_var {
            self.poison_cwd();
        }
    }

    /// `for HOME in …` assigns too.
    pub(super) fn loop_variable(&mut self, node: Node, src: &str) {
        let var = node.child_by_field_name("variable");
        if var.is_some_and(|v| CWD_VARS.contains(&node_text(v, src))) {
            self.poison_cwd();
        }
    }

    /// From here on `cd` and `~` may lead anywhere.
    pub(super) fn poison_cwd(&mut self) {
        self.home = None;
        self.set_unknown();
    }

    pub(super) fn command(&mut self, node: Node, src: &str, level: usize) {
        let parts = Parts::of(node, src);
        // `HOME=/etc cd` already goes somewhere else.
        for &assignment in &parts.assignments {
            if assigns_cwd_var(assignment, src) {
                self.poison_cwd();
            }
        }
        let name = parts.name.and_then(|n| static_word(n, src)).map(|w| w.text);
        let is_cd = name
            .as_deref()
            .is_some_and(|n| CD_COMMANDS.contains(&basename(n)));
        if is_cd && !parts.redirected {
            self.changed_dir = true;
        }
        let asked = (!is_cd || parts.redirected).then(|| self.ask(node, &parts, src, is_cd));
        if let Some(pattern) = &asked {
            // Before `run`, so that the spellings stay in pattern order when a script inside
            // adds patterns of its own.
            let own = parts.name.map(|name| {
                normal_call(
                    Call {
                        name,
                        args: &parts.args,
                    },
                    &parts.tail,
                    src,
                )
            });
            self.spell(pattern, own.into_iter().collect());
        }
        let inner = self.run(node, &parts, src, level);
        if let Some(pattern) = &asked {
            self.spell(pattern, inner);
        }
        self.env_reads(&parts.args, src);
    }

    /// Records the command's `bash` pattern and its "always" pattern; returns the pattern.
    pub(super) fn ask(&mut self, node: Node, parts: &Parts, src: &str, is_cd: bool) -> String {
        let text = pattern_text(node, src);
        let mut cursor = node.walk();
        let token_nodes: Vec<Node> = node
            .named_children(&mut cursor)
            .filter(|c| {
                matches!(
                    c.kind(),
                    "command_name" | "word" | "string" | "raw_string" | "concatenation"
                )
            })
            .collect();
        let tokens: Vec<&str> = token_nodes.iter().map(|&c| node_text(c, src)).collect();
        let name = parts.name.and_then(|n| static_word(n, src)).map(|w| w.text);
        // A name only known at run time could be anything, a wrapper or interpreter runs
        // anything, and a prefix would drop leading assignments (`PAGER=… git log`) or
        // redirections: for those, "always" approves exactly this line.
        let exact = is_cd || parts.prefixed || exact_always(name.as_deref(), &token_nodes, src);
        self.patterns.push(text);
        if exact {
            self.always.push(text);
        } else {
            self.always.push(&format!("{} *", arity::prefix(&tokens)));
        }
        text.to_string()
    }

    /// Adds the other spellings of `pattern`; the entry is made even with none, to hold the
    /// pattern's place (`finish` drops the empty ones).
    pub(super) fn spell(&mut self, pattern: &str, forms: Vec<String>) {
        let at = match self.spelling_at.get(pattern) {
            Some(&at) => at,
            None => {
                self.spellings
                    .push((pattern.to_string(), Ordered::default()));
                self.spelling_at
                    .insert(pattern.to_string(), self.spellings.len() - 1);
                self.spellings.len() - 1
            }
        };
        for form in forms.iter().filter(|f| *f != pattern) {
            self.spellings[at].1.push(form);
        }
    }

    /// Follows the command through any wrappers to what finally runs, checking paths and
    /// scanning scripts on the way; returns the normalised wrapped commands.
    pub(super) fn run(
        &mut self,
        node: Node,
        parts: &Parts,
        src: &str,
        level: usize,
    ) -> Vec<String> {
        let mut forms = Vec::new();
        let Some(name) = parts.name else {
            self.path_args("", &parts.args, src);
            return forms;
        };
        let mut queue = VecDeque::from([(
            Call {
                name,
                args: &parts.args,
            },
            Ctx::default(),
        )]);
        let (mut work, budget) = (0, PEEL_WORK_PER_WORD * (parts.args.len() + 1));
        while let Some((call, ctx)) = queue.pop_front() {
            let peeled = peel(call, src);
            if let Some(p) = &peeled {
                if work > budget {
                    self.under(ctx, |s| s.path_args("", call.args, src));
                    continue;
                }
                work += p.cost;
            }
            // Every command that finally runs is spelled out; the wrappers in between only up
            // to a bound, since each spelling is as long as the rest of the line.
            if ctx.depth > 0 && (peeled.is_none() || ctx.depth <= MAX_SPELLED_WRAPPERS) {
                forms.push(normal_call(call, &parts.tail, src));
            }
            match peeled {
                Some(peeled) => queue.extend(self.wrapper(call, ctx, peeled, node, src, level)),
                None => self.final_call(call, ctx, src),
            }
        }
        forms
    }

    /// A command that runs others: checks the places its own options name, scans the
    /// scripts it runs, and returns the commands it runs, each with its context.
    pub(super) fn wrapper<'n, 't>(
        &mut self,
        call: Call<'n, 't>,
        ctx: Ctx,
        peeled: Peeled<'n, 't>,
        node: Node,
        src: &str,
        level: usize,
    ) -> Vec<(Call<'n, 't>, Ctx)> {
        for (word, is_dir) in peeled.places {
            if is_dir {
                self.judge_dir(word);
            } else {
                self.judge_arg(word);
            }
        }
        if peeled.unsure {
            // Where the command starts is unclear: no spelling, but every word may be a
            // path (as for a command whose name is only known at run time).
            self.under(ctx, |s| s.path_args("", call.args, src));
            return Vec::new();
        }
        if peeled.no_run {
            return Vec::new();
        }
        if peeled.cwd_unknown {
            self.poison_cwd();
        }
        if ctx.appended && !peeled.scripts.is_empty() {
            // `xargs -I{} sh -c 'rm {}'`: the script is completed at run time.
            self.anywhere();
        }
        for script in peeled.scripts {
            self.run_script(script, level, peeled.in_shell);
        }
        if peeled.reads_stdin {
            self.stdin_script(node, src, level);
        }
        let inner_ctx = |moved: bool| Ctx {
            moved: ctx.moved || peeled.moves || moved,
            appended: ctx.appended || peeled.appends,
            depth: ctx.depth + 1,
        };
        peeled
            .calls
            .into_iter()
            .map(|(inner, moved)| (inner, inner_ctx(moved)))
            .collect()
    }

    /// A command that runs no other: check its paths if it takes paths, and note what it
    /// does to the directory.
    pub(super) fn final_call(&mut self, call: Call, ctx: Ctx, src: &str) {
        let name = static_word(call.name, src).map(|w| w.text);
        match name.as_deref().map(basename) {
            Some(cd) if CD_COMMANDS.contains(&cd) => {
                self.under(ctx, |s| s.change_dir(cd, call.args, src));
            }
            Some(n) if PATH_COMMANDS.contains(&n) => {
                self.under(ctx, |s| s.path_args(n, call.args, src));
                if ctx.appended {
                    self.anywhere();
                }
            }
            Some(n) => self.side_effects(n, call.args, src),
            // A name known only at run time may well be `rm`.
            None => {
                self.under(ctx, |s| s.path_args("", call.args, src));
                if ctx.appended {
                    self.anywhere();
                }
            }
        }
    }

    /// `shopt`, `read HOME`, … change what `cd` and `~` mean.
    pub(super) fn side_effects(&mut self, name: &str, args: &[Node], src: &str) {
        let assigns = ASSIGNING.contains(&name)
            && args
                .iter()
                .filter_map(|&a| static_word(a, src))
                .any(|w| names_cwd_var(&w.text));
        if assigns || CWD_UNKNOWN_AFTER.contains(&name) {
            self.poison_cwd();
        }
    }

    /// Runs `f` with the directory unknown when a wrapper moved the command elsewhere; the
    /// shell itself stays where it was.
    pub(super) fn under(&mut self, ctx: Ctx, f: impl FnOnce(&mut Self)) {
        if !ctx.moved {
            return f(self);
        }
        let saved = std::mem::replace(&mut self.dirs, Dirs::Unknown);
        f(self);
        self.dirs = saved;
    }

    /// A script a command runs: scanned when its text is known and we are not nested too
    /// deep, else it could do anything (`*`), and in the current shell that includes `cd`.
    pub(super) fn run_script(&mut self, script: Option<String>, level: usize, in_shell: bool) {
        let Some(script) = script else {
            return self.unknown_script(in_shell);
        };
        let script = script.trim();
        if script.is_empty() {
            return;
        }
        if self.nesting >= MAX_NESTING {
            return self.unknown_script(in_shell);
        }
        self.nesting += 1;
        // A few frames (this call chain) on top of the command's own level.
        let readable = self.script(script, level + 4);
        self.nesting -= 1;
        if !readable {
            self.patterns.push(script);
            self.always.push(script);
        }
    }

    pub(super) fn unknown_script(&mut self, in_shell: bool) {
        self.anywhere();
        if in_shell {
            self.poison_cwd();
        }
    }

    /// A shell with neither `-c` nor a script file reads its script from stdin.
    pub(super) fn stdin_script(&mut self, node: Node, src: &str, level: usize) {
        match stdin_of(node, src) {
            Stdin::Text(text) => self.run_script(text, level, false),
            Stdin::Unknown => self.anywhere(),
            Stdin::File | Stdin::Inherited => {}
        }
    }
}

impl<'t> Parts<'t> {
    pub(super) fn of(node: Node<'t>, src: &str) -> Self {
        let mut parts = Parts {
            name: None,
            args: Vec::new(),
            assignments: Vec::new(),
            prefixed: false,
            redirected: false,
            tail: Vec::new(),
        };
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            match child.kind() {
                "command_name" => parts.name = Some(child),
                "variable_assignment" => {
                    parts.prefixed |= parts.name.is_none();
                    parts.assignments.push(child);
                }
                kind if REDIRECT_KINDS.contains(&kind) => {
                    parts.redirected = true;
                    if parts.name.is_none() {
                        parts.prefixed = true;
                    } else {
                        parts.redirect_after(child, src);
                    }
                }
                "comment" => {}
                _ => parts.args.push(child),
            }
        }
        // Redirections written after the command belong to it too (`ls > f 2>&1`).
        if let Some(owner) = redirect_owner(node) {
            let mut cursor = owner.walk();
            for child in owner.named_children(&mut cursor) {
                if REDIRECT_KINDS.contains(&child.kind()) {
                    parts.redirected = true;
                    parts.redirect_after(child, src);
                }
            }
        }
        parts.args.sort_by_key(Node::start_byte);
        parts
    }

    pub(super) fn redirect_after(&mut self, redirect: Node<'t>, src: &str) {
        self.tail.push(normal_redirect(redirect, src));
        if redirect.kind() == "file_redirect" {
            self.args
                .extend(redirect_targets(redirect).into_iter().skip(1));
        }
    }
}

/// The words after a file redirection's operator: the target, then any words tree-sitter
/// wrongly attached to it.
pub(super) fn redirect_targets(node: Node) -> Vec<Node> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor)
        .filter(|c| c.kind() != "file_descriptor")
        .collect()
}

/// Pre-order visit of a subtree without recursion (trees can be deep); `visit` also gets
/// the depth below `node`.
pub(super) fn each_node<'t>(node: Node<'t>, mut visit: impl FnMut(Node<'t>, usize)) {
    let mut cursor = node.walk();
    let mut depth = 0usize;
    loop {
        visit(cursor.node(), depth);
        if cursor.goto_first_child() {
            depth += 1;
            continue;
        }
        loop {
            if depth == 0 {
                return;
            }
            if cursor.goto_next_sibling() {
                break;
            }
            cursor.goto_parent();
            depth -= 1;
        }
    }
}

pub(super) fn tree_depth(root: Node) -> usize {
    let mut deepest = 0;
    each_node(root, |_, depth| deepest = deepest.max(depth));
    deepest
}
