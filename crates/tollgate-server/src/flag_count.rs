//! A count given on the command line: a whole number within the range that makes sense for its
//! flag, else an error that says the range and why.

/// `text` as a whole number within `range`; `why` says why the range is what it is.
pub(crate) fn count_in(
    text: &str,
    range: std::ops::RangeInclusive<usize>,
    why: &str,
) -> Result<usize, String> {
    let value: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number"))?;
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "must be from {} to {} ({why})",
            range.start(),
            range.end()
        ))
    }
}
