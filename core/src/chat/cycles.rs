//! A check at template load that no namespace can ever hold itself.
//!
//! minijinja lets a template store any value in a namespace attribute, so
//! `{% set ns.x = ns %}` builds a reference cycle. Printing, comparing, concatenating or
//! hashing such a value recurses inside minijinja until the stack overflows, which aborts
//! the process; no hook reaches that code. So a template is refused when it could build
//! a cycle, before it ever runs.
//!
//! The rule, conservative and cheap: a namespace may only ever hold plain values. A
//! template is refused when it stores a value that may be or hold a namespace in a
//! namespace attribute (`set a.b = value`) or passes one to `namespace(...)`. Then, as
//! every other value is immutable, no cycle can form. Each expression gets a [`Kind`]:
//! - `Plain`: holds no namespace. Values from the request (`messages`, `tools`, ...),
//!   constants, comparisons, tests, `~`, `not`, macro calls (they render strings), and an
//!   attribute or item of a `Ns` value: by the rule itself, a namespace's attributes are
//!   plain, and iterating one gives its keys.
//! - `Ns`: plain or a namespace itself: `namespace(...)`, names only bound to such, a
//!   filter of such with plain arguments.
//! - `Deep`: may hold a namespace anywhere: lists and maps of non-plain values, anything
//!   called with one or filtered with one as argument, an attribute or item of a `Deep`
//!   value, imports, macro objects.
//!
//! Names take the join of every binding (`set`, `with`, `for` targets; a macro parameter:
//! its default and every argument a call of that macro by name passes for it, plus every
//! argument of calls through anything else), iterated to a fixed point. Real chat
//! templates keep counters, flags and strings in namespaces (`set ns.n = ns.n + 1`) and
//! pass a namespace to macros that update it; they pass (docs/reliability.md lists the
//! real templates checked).

use std::collections::HashMap;

use minijinja::machinery::ast::{BinOpKind, CallArg, Expr, Stmt};
use minijinja::machinery::{ast, parse, WhitespaceConfig};

/// What a value may hold (ordered: the join of two kinds is the larger).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    #[default]
    Plain,
    Ns,
    Deep,
}

/// Refuse a template that could store a namespace inside a namespace. `Err` holds a
/// message with the line of the first such statement. A template that does not parse
/// passes here: compiling it reports the syntax error.
pub(super) fn check(source: &str) -> Result<(), String> {
    let Ok(root) = parse(source, "chat", Default::default(), WhitespaceConfig::default()) else { return Ok(()) };
    let mut flow = Flow::default();
    // A pass can only raise kinds, and there are three, so this ends.
    loop {
        flow.changed = false;
        flow.refusals.clear();
        flow.stmt(&root);
        if !flow.changed {
            break;
        }
    }
    match flow.refusals.first() {
        Some((line, why)) => Err(format!("line {line}: {why}; a namespace that holds itself cannot be rendered")),
        None => Ok(()),
    }
}

/// Where a call argument lands in a macro.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Slot<'a> {
    Pos(usize),
    Kw(&'a str),
    Splat, // `*args` or `**kwargs`: any parameter
}

#[derive(Default)]
struct Flow<'a> {
    /// The join of every binding of each name the template binds.
    names: HashMap<&'a str, Kind>,
    /// Names bound by `{% macro %}` and by nothing else.
    macros: HashMap<&'a str, bool>,
    /// Arguments of calls that name a macro directly, by macro and slot.
    params: HashMap<(&'a str, Slot<'a>), Kind>,
    /// The join of those arguments, for `varargs` and `kwargs`.
    macro_args: Kind,
    /// The join of every argument of every other call (but `namespace(...)`): a call
    /// through an alias, a module or `loop(...)` may reach any macro parameter or a
    /// recursive loop's target.
    other_args: Kind,
    /// The join of every `for` loop's items: what `loop.previtem` and friends may be.
    items: Kind,
    changed: bool,
    refusals: Vec<(u16, &'static str)>, // (line, why)
}

fn raise(slot: &mut Kind, k: Kind, changed: &mut bool) {
    if k > *slot {
        *slot = k;
        *changed = true;
    }
}

fn call_args<'s, 'a>(args: &'s [CallArg<'a>]) -> impl Iterator<Item = &'s Expr<'a>> {
    args.iter().map(|a| match a {
        CallArg::Pos(x) | CallArg::Kwarg(_, x) | CallArg::PosSplat(x) | CallArg::KwargSplat(x) => x,
    })
}

impl<'a> Flow<'a> {
    /// `namespace` still names minijinja's constructor (the template never rebinds it).
    fn is_namespace_call(&self, c: &ast::Call) -> bool {
        matches!(&c.expr, Expr::Var(v) if v.id == "namespace") && !self.names.contains_key("namespace")
    }

    fn bind_name(&mut self, id: &'a str, kind: Kind, is_macro: bool) {
        let slot = self.names.entry(id).or_default();
        raise(slot, kind, &mut self.changed);
        let only_macro = self.macros.entry(id).or_insert(is_macro);
        *only_macro &= is_macro;
    }

    fn bind(&mut self, target: &Expr<'a>, kind: Kind) {
        match target {
            Expr::Var(v) => self.bind_name(v.id, kind, false),
            // Unpacking: an element of a `Ns` value is plain, of a `Deep` one anything.
            Expr::List(l) => {
                let inner = if kind == Kind::Deep { Kind::Deep } else { Kind::Plain };
                l.items.iter().for_each(|t| self.bind(t, inner));
            }
            _ => {}
        }
    }

    fn kind(&self, e: &Expr) -> Kind {
        // An attribute, item or element of a value of kind `k`.
        let inside = |k: Kind| if k == Kind::Deep { Kind::Deep } else { Kind::Plain };
        let any = |k: Kind| if k == Kind::Plain { Kind::Plain } else { Kind::Deep };
        match e {
            Expr::Var(v) => match v.id {
                "namespace" => Kind::Deep, // the constructor itself, passed around
                "loop" => self.names.get("loop").copied().unwrap_or_default().max(any(self.items)),
                "varargs" | "kwargs" => {
                    self.names.get(v.id).copied().unwrap_or_default().max(any(self.macro_args.max(self.other_args)))
                }
                id => self.names.get(id).copied().unwrap_or_default(),
            },
            Expr::Const(_) | Expr::Compare(_) | Expr::Test(_) | Expr::UnaryOp(_) => Kind::Plain,
            Expr::BinOp(b) => match b.op {
                BinOpKind::Add | BinOpKind::Mul | BinOpKind::ScAnd | BinOpKind::ScOr => {
                    self.kind(&b.left).max(self.kind(&b.right))
                }
                _ => Kind::Plain, // comparisons, `in`, `~` and arithmetic on numbers
            },
            Expr::IfExpr(i) => self.kind(&i.true_expr).max(i.false_expr.as_ref().map_or(Kind::Plain, |f| self.kind(f))),
            // A filter of plain data gives plain data; of a namespace, its keys, its plain
            // attributes, a string, or (`default`) the namespace itself.
            Expr::Filter(f) => {
                let input = f.expr.as_ref().map_or(Kind::Plain, |x| self.kind(x));
                let args = call_args(&f.args).fold(Kind::Plain, |k, x| k.max(self.kind(x)));
                if args == Kind::Plain {
                    input
                } else {
                    Kind::Deep
                }
            }
            Expr::Slice(s) => inside(self.kind(&s.expr)),
            // The loop's counters and flags are numbers and booleans.
            Expr::GetAttr(g) if matches!(&g.expr, Expr::Var(v) if v.id == "loop" && !self.names.contains_key("loop")) => {
                if matches!(g.name, "previtem" | "nextitem") {
                    any(self.items)
                } else {
                    Kind::Plain
                }
            }
            Expr::GetAttr(g) => inside(self.kind(&g.expr)),
            Expr::GetItem(g) => inside(self.kind(&g.expr)),
            Expr::Call(c) => {
                if self.is_namespace_call(c) {
                    return Kind::Ns;
                }
                let is_macro = matches!(&c.expr, Expr::Var(v) if self.macros.get(v.id) == Some(&true));
                if is_macro {
                    return Kind::Plain; // a macro renders a string
                }
                any(call_args(&c.args).fold(self.kind(&c.expr), |k, x| k.max(self.kind(x))))
            }
            Expr::List(l) => any(l.items.iter().fold(Kind::Plain, |k, x| k.max(self.kind(x)))),
            Expr::Map(m) => any(m.keys.iter().chain(&m.values).fold(Kind::Plain, |k, x| k.max(self.kind(x)))),
        }
    }

    fn call(&mut self, c: &ast::Spanned<ast::Call<'a>>) {
        self.expr(&c.expr);
        call_args(&c.args).for_each(|x| self.expr(x));
        if self.is_namespace_call(c) {
            if call_args(&c.args).any(|x| self.kind(x) != Kind::Plain) {
                self.refusals
                    .push((c.span().start_line, "`namespace(...)` is given a value that may hold a namespace"));
            }
            return;
        }
        let callee = match &c.expr {
            Expr::Var(v) if self.macros.get(v.id) == Some(&true) => Some(v.id),
            _ => None,
        };
        let mut pos = 0;
        for a in &c.args {
            let (slot, x) = match a {
                CallArg::Pos(x) => {
                    pos += 1;
                    (Slot::Pos(pos - 1), x)
                }
                CallArg::Kwarg(name, x) => (Slot::Kw(name), x),
                CallArg::PosSplat(x) | CallArg::KwargSplat(x) => (Slot::Splat, x),
            };
            let k = self.kind(x);
            match callee {
                Some(m) => {
                    raise(self.params.entry((m, slot)).or_default(), k, &mut self.changed);
                    raise(&mut self.macro_args, k, &mut self.changed);
                }
                None => raise(&mut self.other_args, k, &mut self.changed),
            }
        }
    }

    /// Visit every sub-expression (for calls and the refusals they may cause).
    fn expr(&mut self, e: &Expr<'a>) {
        match e {
            Expr::Var(_) | Expr::Const(_) => {}
            Expr::Slice(s) => {
                self.expr(&s.expr);
                for x in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(x);
                }
            }
            Expr::UnaryOp(u) => self.expr(&u.expr),
            Expr::BinOp(b) => {
                self.expr(&b.left);
                self.expr(&b.right);
            }
            Expr::Compare(c) => {
                self.expr(&c.expr);
                c.ops.iter().for_each(|o| self.expr(&o.expr));
            }
            Expr::IfExpr(i) => {
                self.expr(&i.test_expr);
                self.expr(&i.true_expr);
                if let Some(f) = &i.false_expr {
                    self.expr(f);
                }
            }
            Expr::Filter(f) => {
                if let Some(x) = &f.expr {
                    self.expr(x);
                }
                call_args(&f.args).for_each(|x| self.expr(x));
            }
            Expr::Test(t) => {
                self.expr(&t.expr);
                call_args(&t.args).for_each(|x| self.expr(x));
            }
            Expr::GetAttr(g) => self.expr(&g.expr),
            Expr::GetItem(g) => {
                self.expr(&g.expr);
                self.expr(&g.subscript_expr);
            }
            Expr::Call(c) => self.call(c),
            Expr::List(l) => l.items.iter().for_each(|x| self.expr(x)),
            Expr::Map(m) => m.keys.iter().chain(&m.values).for_each(|x| self.expr(x)),
        }
    }

    fn stmts(&mut self, body: &[Stmt<'a>]) {
        body.iter().for_each(|s| self.stmt(s));
    }

    fn macro_decl(&mut self, m: &ast::Macro<'a>) {
        // The macro object holds its closure (a namespace, maybe): never store it.
        self.bind_name(m.name, Kind::Deep, true);
        m.defaults.iter().for_each(|d| self.expr(d));
        let first_default = m.args.len().saturating_sub(m.defaults.len());
        for (i, arg) in m.args.iter().enumerate() {
            let slot = |s: Slot<'a>| self.params.get(&(m.name, s)).copied().unwrap_or_default();
            let mut kind = self.other_args.max(slot(Slot::Pos(i))).max(slot(Slot::Splat));
            if let Expr::Var(v) = arg {
                kind = kind.max(slot(Slot::Kw(v.id)));
            }
            if let Some(d) = i.checked_sub(first_default).and_then(|j| m.defaults.get(j)) {
                kind = kind.max(self.kind(d));
            }
            self.bind(arg, kind);
        }
        self.stmts(&m.body);
    }

    fn stmt(&mut self, s: &Stmt<'a>) {
        match s {
            Stmt::Template(t) => self.stmts(&t.children),
            Stmt::EmitExpr(e) => self.expr(&e.expr),
            Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => {}
            Stmt::ForLoop(f) => {
                self.expr(&f.iter);
                // Iterating a namespace gives its keys; a recursive loop is also fed by `loop(...)`.
                let mut items = if self.kind(&f.iter) == Kind::Deep { Kind::Deep } else { Kind::Plain };
                if f.recursive && self.other_args != Kind::Plain {
                    items = Kind::Deep;
                }
                raise(&mut self.items, items, &mut self.changed);
                self.bind(&f.target, items);
                if let Some(x) = &f.filter_expr {
                    self.expr(x);
                }
                self.stmts(&f.body);
                self.stmts(&f.else_body);
            }
            Stmt::IfCond(i) => {
                self.expr(&i.expr);
                self.stmts(&i.true_body);
                self.stmts(&i.false_body);
            }
            Stmt::WithBlock(w) => {
                for (target, value) in &w.assignments {
                    self.expr(value);
                    self.bind(target, self.kind(value));
                }
                self.stmts(&w.body);
            }
            Stmt::Set(set) => {
                self.expr(&set.expr);
                if let Expr::GetAttr(g) = &set.target {
                    self.expr(&g.expr);
                    if self.kind(&set.expr) != Kind::Plain {
                        let why = "a namespace attribute is set to a value that may hold a namespace";
                        self.refusals.push((set.span().start_line, why));
                    }
                } else {
                    self.bind(&set.target, self.kind(&set.expr));
                }
            }
            Stmt::SetBlock(set) => {
                // Captures rendered text: a string.
                if let Some(f) = &set.filter {
                    self.expr(f);
                }
                self.stmts(&set.body);
                self.bind(&set.target, Kind::Plain);
            }
            Stmt::AutoEscape(a) => {
                self.expr(&a.enabled);
                self.stmts(&a.body);
            }
            Stmt::FilterBlock(f) => {
                self.expr(&f.filter);
                self.stmts(&f.body);
            }
            Stmt::Block(b) => self.stmts(&b.body),
            Stmt::Extends(e) => self.expr(&e.name),
            Stmt::Include(i) => self.expr(&i.name),
            // A module exposes the imported template's top-level names, namespaces included.
            Stmt::Import(i) => {
                self.expr(&i.expr);
                self.bind(&i.name, Kind::Deep);
            }
            Stmt::FromImport(f) => {
                self.expr(&f.expr);
                for (name, alias) in &f.names {
                    self.bind(alias.as_ref().unwrap_or(name), Kind::Deep);
                }
            }
            Stmt::Macro(m) => self.macro_decl(m),
            Stmt::CallBlock(c) => {
                self.call(&c.call);
                self.macro_decl(&c.macro_decl);
            }
            Stmt::Do(d) => self.call(&d.call),
        }
    }
}
