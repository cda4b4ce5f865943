//! How far a word is from the one meant, for "did you mean" in messages: a misspelt
//! subcommand, an unknown config key. One measure everywhere, so the same slip gets the
//! same suggestion whichever message names it.

/// The optimal-string-alignment distance by characters: insertions, deletions,
/// substitutions, and a swap of two neighbours counted as one edit (the commonest slip:
/// `modle`, `proflie`).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The known word closest to `word`, when it is close enough to be the one meant: an edit
/// distance of at most a third of its length (and at least one), as a typo would be.
pub fn did_you_mean<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    known
        .iter()
        .map(|k| (edit_distance(word, k), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_is_one_edit() {
        assert_eq!(edit_distance("proflie", "profile"), 1);
        assert_eq!(edit_distance("doctr", "doctor"), 1);
        assert_eq!(edit_distance("sesion", "sessions"), 2);
        assert_eq!(edit_distance("", "run"), 3);
        assert_eq!(did_you_mean("modle", &["model", "mode_x"]), Some("model"));
        assert_eq!(did_you_mean("agent", &["model", "hooks"]), None);
    }
}
