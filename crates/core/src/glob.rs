//! The glob of `retryStrategy.evaluateOnExit.onStatusReason`: `*` matches any run of
//! characters (AWS documents a trailing `*`; its own examples also use a leading one), every
//! other character matches itself.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Greedy match with backtracking to the last star: linear in practice, no recursion.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn trailing_star_is_a_prefix_match() {
        assert!(matches(
            "Received status from SageMaker: InternalServerError*",
            "Received status from SageMaker: InternalServerError: boom"
        ));
        assert!(!matches(
            "Received status from SageMaker: Internal*",
            "exit code 1"
        ));
    }

    #[test]
    fn leading_and_inner_stars_match_anywhere() {
        assert!(matches(
            "*CapacityError*",
            "Failed: CapacityError: none left"
        ));
        assert!(matches("a*c*e", "abcde"));
        assert!(!matches("a*c*e", "abcdf"));
    }

    #[test]
    fn without_stars_the_whole_text_must_match() {
        assert!(matches("exit code 3", "exit code 3"));
        assert!(!matches("exit code 3", "exit code 31"));
        assert!(matches("*", ""));
    }
}
