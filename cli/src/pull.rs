//! `tl pull`, `tl list`, `tl rm`, and how every subcommand's MODEL becomes a path: a path
//! on disk as it is, a catalog name or an `hf:` reference through tl-hub (found on disk
//! without a request when it is there; pulled on first use with `--yes` or when the user
//! answers the question on a terminal).

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use tl_families::flags::ModelArg;
use tl_hub::{Consent, HubConfig};

/// `tl pull`: download models by name.
#[derive(clap::Args, Debug)]
pub struct PullArgs {
    /// Catalog names (`tl list --catalog`), `hf:ORG/REPO`, `hf:ORG/REPO:QUANT` or `hf:ORG/REPO/FILE`.
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
}

impl PullArgs {
    /// Pull each, printing its path; a failure stops at that name.
    pub fn run(&self) -> anyhow::Result<()> {
        let cfg = HubConfig::from_env();
        for name in &self.names {
            let path = tl_hub::pull(&cfg, name)?;
            println!("{name}\t{}", path.display());
        }
        Ok(())
    }
}

/// `tl list`: what is on disk.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// List the catalog's names instead, marking those already pulled.
    #[arg(long)]
    pub catalog: bool,
}

fn mb(bytes: u64) -> String {
    format!("{:.0} MB", bytes as f64 / 1e6)
}

impl ListArgs {
    /// Print one model per line: name, size, format, where.
    pub fn run(&self) -> anyhow::Result<()> {
        let cfg = HubConfig::from_env();
        let third = if self.catalog { "ABOUT" } else { "FORMAT" };
        let mut rows = vec![["NAME".to_string(), "SIZE".into(), third.into(), "WHERE".into()]];
        if self.catalog {
            for e in tl_hub::catalog::entries()? {
                let at = tl_hub::pypi::local(&cfg, &e).map_or("(not pulled)".into(), |p| p.display().to_string());
                rows.push([e.name.clone(), mb(e.bytes()), e.about.clone(), at]);
            }
        } else {
            for m in tl_hub::store::list(&cfg)? {
                rows.push([m.name, mb(m.bytes), m.format, m.path.display().to_string()]);
            }
        }
        let width = |i: usize| rows.iter().map(|r| r[i].len()).max().unwrap_or(0);
        let (w0, w1, w2) = (width(0), width(1), width(2));
        let mut out = std::io::stdout().lock();
        for r in &rows {
            writeln!(out, "{:w0$}  {:>w1$}  {:w2$}  {}", r[0], r[1], r[2], r[3])?;
        }
        Ok(())
    }
}

/// `tl rm`: remove pulled models.
#[derive(clap::Args, Debug)]
pub struct RmArgs {
    /// Catalog names or `hf:` references (`hf:ORG/REPO` removes the whole cached repository).
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
}

impl RmArgs {
    /// Remove each, printing what went.
    pub fn run(&self) -> anyhow::Result<()> {
        let cfg = HubConfig::from_env();
        for name in &self.names {
            for p in tl_hub::store::remove(&cfg, name)? {
                println!("removed {}", p.display());
            }
        }
        Ok(())
    }
}

/// Whether a MODEL text is meant as a path (the loader names a missing one) rather than a
/// name for tl-hub.
fn looks_like_path(text: &str) -> bool {
    !text.starts_with("hf:")
        && !text.starts_with("hf.co/")
        && (text.contains(['/', '\\'])
            || text.starts_with('.')
            || text.ends_with(".gguf")
            || text.ends_with(".safetensors"))
}

fn ask(question: &str) -> bool {
    eprint!("tl: {question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).is_ok() && matches!(line.trim(), "y" | "Y" | "yes" | "Yes")
}

/// Replace the models a subcommand names by their paths on disk, pulling them first where
/// `yes` or the user's answer allows (a question only when stdin and stderr are terminals).
/// `positional`: whether MODEL is a model even beside `--model` (serve's several models;
/// `tl run --model M PROMPT` keeps the prompt where MODEL would go).
pub fn resolve_model(arg: &mut ModelArg, yes: bool, positional: bool) -> anyhow::Result<()> {
    let asker = |q: &str| ask(q);
    let consent = if yes {
        Consent::Yes
    } else if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        Consent::Ask(&asker)
    } else {
        Consent::No
    };
    let cfg = HubConfig::from_env();
    let pos = if positional || arg.model_flag.is_empty() { arg.model_pos.as_mut() } else { None };
    for slot in pos.into_iter().chain(arg.model_flag.iter_mut()) {
        let Some(text) = slot.to_str().map(str::to_string) else { continue };
        if Path::new(&text).exists() || looks_like_path(&text) {
            continue;
        }
        *slot = tl_hub::resolve(&cfg, &text, &consent)?;
    }
    Ok(())
}

/// `serve --speculate draft:MODEL[:K]`: the draft model may be a name too.
pub fn resolve_draft(speculate: &mut String, yes: bool) -> anyhow::Result<()> {
    let Ok((_, Some(model))) = tl_serve::cmd::serve::speculate_flag(speculate) else { return Ok(()) };
    let text = model.to_string_lossy().into_owned();
    let mut arg = ModelArg { model_pos: Some(model), model_flag: Vec::new() };
    resolve_model(&mut arg, yes, true)?;
    if let Some(path) = arg.model_pos.filter(|p| p.to_string_lossy() != text) {
        *speculate = speculate.replacen(&text, &path.to_string_lossy(), 1);
    }
    Ok(())
}
