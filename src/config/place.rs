//! Turns byte offsets in the file into the line and column every error carries, and
//! toml's own errors into [`ConfigError`]s that quote what they point at.

use std::ops::Range;

use crate::ConfigError;

/// The longest stretch of the file an error quotes; longer values are cut with `…`.
const MAX_QUOTE: usize = 60;

/// The text being read, to place errors in it.
pub(super) struct Text<'a>(pub(super) &'a str);

impl Text<'_> {
    /// `error`, placed at the start of `span`.
    pub(super) fn place(&self, error: ConfigError, span: &Range<usize>) -> ConfigError {
        let (line, column) = self.line_column(span.start);
        error.at(line, column)
    }

    /// 1-based line and column (in characters) of byte `offset`.
    fn line_column(&self, offset: usize) -> (usize, usize) {
        let before = self.0.get(..offset).unwrap_or(self.0);
        let line_start = before.rfind('\n').map_or(0, |at| at + 1);
        let line = before.matches('\n').count() + 1;
        (line, before[line_start..].chars().count() + 1)
    }

    /// The file's text in `span` on its first line, quoted (`"..."`) and cut to
    /// [`MAX_QUOTE`] characters; for an empty span (a string never closed), the line
    /// it ends.
    fn quote(&self, span: &Range<usize>) -> Option<String> {
        let spanned = self
            .0
            .get(span.clone())?
            .lines()
            .next()
            .unwrap_or("")
            .trim();
        let text = if spanned.is_empty() {
            let before = self.0.get(..span.start)?;
            before[before.rfind('\n').map_or(0, |at| at + 1)..].trim()
        } else {
            spanned
        };
        if text.is_empty() {
            return None;
        }
        let mut quoted: String = text.chars().take(MAX_QUOTE).collect();
        if quoted.len() < text.len() {
            quoted.push('…');
        }
        Some(format!("\"{}\"", quoted.escape_debug()))
    }

    /// A syntax or shape error from toml (bad TOML, an unknown key, a value of the wrong
    /// type), placed, with the text it points at quoted.
    pub(super) fn toml_error(&self, error: &toml::de::Error) -> ConfigError {
        // toml's message may run over several lines (a list of expected keys): the
        // first is the mistake, the rest are kept on one line after it.
        let message = error
            .message()
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        let Some(span) = error.span() else {
            return ConfigError::new(message);
        };
        let message = match self.quote(&span) {
            Some(quoted) => format!("{message} (at {quoted})"),
            None => message,
        };
        self.place(ConfigError::new(message), &span)
    }
}
