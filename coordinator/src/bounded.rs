//! Text a worker sends, bounded before the coordinator keeps or shows it:
//! reasons end up in every status answer, paths and digests in logs and
//! refusals.

/// Longest failure reason kept (longer ones are cut): reasons are shown by
/// every status answer.
pub const MAX_REASON_BYTES: usize = 1024;

/// `s` cut to at most `max` bytes on a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes cut)", &s[..end], s.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_cut_on_a_character_boundary() {
        let long = "é".repeat(1000);
        let cut = truncate(&long, 101);
        assert!(
            cut.starts_with(&"é".repeat(50)) && cut.ends_with("(1900 bytes cut)"),
            "{cut}"
        );
        assert_eq!(truncate("short", 10), "short");
    }
}
