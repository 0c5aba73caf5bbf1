//! The one rule for a command that writes a new dataset next to the one it
//! reads (`filter`, `rescore`): the output is a new or empty directory, and
//! not inside the input, where the next stage would read it back as data.

use std::path::Path;

/// Why `out` cannot take a new dataset read from `input`.
pub enum Refusal {
    InsideInput,
    NotEmpty,
}

/// `Ok(None)` when `out` may be written; a new directory counts by where
/// its parent is.
pub fn check_new_output(input: &Path, out: &Path) -> std::io::Result<Option<Refusal>> {
    let in_abs = std::fs::canonicalize(input)?;
    let out_abs = std::fs::canonicalize(out).ok().or_else(|| {
        let parent = out.parent().filter(|p| !p.as_os_str().is_empty());
        std::fs::canonicalize(parent.unwrap_or(Path::new(".")))
            .ok()
            .map(|p| p.join(out.file_name().unwrap_or_default()))
    });
    if out_abs.is_some_and(|o| o.starts_with(&in_abs)) {
        return Ok(Some(Refusal::InsideInput));
    }
    if out.is_dir() && std::fs::read_dir(out)?.next().is_some() {
        return Ok(Some(Refusal::NotEmpty));
    }
    Ok(None)
}
