//! One module per command. Each has an `Args` struct (clap) and a `run` function taking the
//! global flags and its arguments.

pub mod call;
pub mod completions;
pub mod config;
pub mod contract_test;
pub mod demo;
pub mod eval;
pub mod keygen;
pub mod list;
pub mod replay;
pub mod rollback;
pub mod search;
pub mod serve;
pub mod sign;
pub mod stats;
pub mod surface;
pub mod token;
pub mod verify;

/// Checks that `path` names a transcript file (`quiver stats`, `quiver replay`): a folder is
/// answered with the transcripts in it to pass instead, a missing path with where transcripts
/// are written.
pub(crate) fn check_transcript_path(path: &std::path::Path) -> anyhow::Result<()> {
    const WHERE: &str = "a session's calls are recorded as `<session>.jsonl` in the folder `transcripts.dir` of quiver.yaml names (`quiver config` shows it)";
    if path.is_dir() {
        let mut found: Vec<String> = std::fs::read_dir(path)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl") && e.path().is_file())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        if found.is_empty() {
            anyhow::bail!(
                "{} is a folder with no transcript (`*.jsonl`) in it; pass one transcript file: {WHERE}",
                path.display()
            );
        }
        let shown =
            found.iter().take(5).map(|f| format!("`{}`", path.join(f).display())).collect::<Vec<_>>().join(", ");
        let more = if found.len() > 5 { format!(" and {} more", found.len() - 5) } else { String::new() };
        anyhow::bail!(
            "{} is a folder; pass one of its {} transcript(s), such as {shown}{more}",
            path.display(),
            found.len()
        );
    }
    if !path.exists() {
        anyhow::bail!("the transcript {} does not exist; {WHERE}", path.display());
    }
    Ok(())
}
