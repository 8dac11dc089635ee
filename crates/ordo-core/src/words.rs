//! Counts in words, as every ordo message prints them: the noun agrees with its number
//! (`1 GPU`, `2 GPUs`, `1 priority`, `3 priorities`) and large numbers carry thousands
//! separators (`8,300 jobs`). One helper for every crate, so that no message says "1 GPUs".

/// `noun` in the form that goes with `n`: itself for 1, else its plural (regular English:
/// `-ies` after a consonant and `y`, `-es` after `s`, `x`, `z`, `ch`, `sh`, else `-s`).
/// Acronyms and units (`GPU`, `CPU`) take `-s`.
pub fn noun(n: usize, noun: &str) -> String {
    if n == 1 {
        return noun.to_string();
    }
    plural(noun)
}

/// The regular English plural of `noun` (see [`noun`]).
pub fn plural(noun: &str) -> String {
    let lower = noun.to_ascii_lowercase();
    let b = lower.as_bytes();
    let vowel = |c: u8| matches!(c, b'a' | b'e' | b'i' | b'o' | b'u');
    if b.len() >= 2 && b[b.len() - 1] == b'y' && !vowel(b[b.len() - 2]) && noun.ends_with('y') {
        format!("{}ies", &noun[..noun.len() - 1])
    } else if noun.ends_with(['s', 'x', 'z']) || noun.ends_with("ch") || noun.ends_with("sh") {
        format!("{noun}es")
    } else {
        format!("{noun}s")
    }
}

/// `n` and its noun: `1 GPU`, `0 GPUs`, `8,300 jobs`. A noun of several words agrees in its
/// last word (`1 bad row`, `2 bad rows`).
pub fn count(n: usize, noun_phrase: &str) -> String {
    let (head, last) = match noun_phrase.rsplit_once(' ') {
        Some((h, l)) => (format!("{h} "), l),
        None => (String::new(), noun_phrase),
    };
    format!("{} {head}{}", group_digits(&n.to_string()), noun(n, last))
}

/// `one` when `n` is 1, else `many`: for verbs and irregular words (`was`/`were`, `has`/`have`).
pub fn agree<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// An amount of memory: whole GiB as `40 GiB`, otherwise `1500 MiB`.
pub fn mib(m: u64) -> String {
    if m >= 1024 && m.is_multiple_of(1024) {
        format!("{} GiB", m / 1024)
    } else {
        format!("{m} MiB")
    }
}

/// A run of ASCII digits with `,` between groups of three (`8300` -> `8,300`); anything else
/// is returned as it is.
pub fn group_digits(digits: &str) -> String {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return digits.to_string();
    }
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nouns_agree_with_their_number() {
        assert_eq!(count(1, "GPU"), "1 GPU");
        assert_eq!(count(0, "GPU"), "0 GPUs");
        assert_eq!(count(2, "GPU"), "2 GPUs");
        assert_eq!(count(1, "bad row"), "1 bad row");
        assert_eq!(count(3, "bad row"), "3 bad rows");
        assert_eq!(count(1, "priority"), "1 priority");
        assert_eq!(count(12_345, "priority"), "12,345 priorities");
        assert_eq!(count(2, "day"), "2 days");
        assert_eq!(count(2, "pass"), "2 passes");
        assert_eq!(count(2, "batch"), "2 batches");
        assert_eq!(agree(1, "was", "were"), "was");
        assert_eq!(agree(4, "was", "were"), "were");
    }

    #[test]
    fn digits_are_grouped_by_three() {
        assert_eq!(group_digits("999"), "999");
        assert_eq!(group_digits("1000"), "1,000");
        assert_eq!(group_digits("1234567"), "1,234,567");
        assert_eq!(group_digits("12a"), "12a");
        assert_eq!(group_digits(""), "");
    }
}
