//! Character-level text: the corpus's vocabulary, tokens and split, the training and
//! evaluation windows (the same batches for any worker count), and the real Shakespeare
//! corpus as `scripts/fetch-shakespeare` leaves it (`scripts/test` fetches it first).

use std::sync::Arc;

use strata_data::{
    CharCorpus, DataError, DataLoader, Dataset, EvalWindows, LoaderOptions, RandomWindows,
    SampleContext,
};

/// A few lines of the corpus's first play.
const TEXT: &str = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\n\
                    Speak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than \
                    to famish?\n";

#[test]
fn vocabulary_tokens_and_split_are_nanogpts() -> Result<(), DataError> {
    let corpus = CharCorpus::from_bytes(TEXT.as_bytes())?;
    let vocab = corpus.vocab();
    assert!(vocab.windows(2).all(|w| w[0] < w[1]), "sorted, distinct");
    assert_eq!(vocab[0], b'\n');
    assert_eq!(corpus.tokens().len(), TEXT.len());
    let tokens = corpus.encode("Speak")?;
    assert_eq!(corpus.decode(&tokens)?, "Speak");
    assert_eq!(
        tokens[0],
        vocab.iter().position(|&b| b == b'S').unwrap_or(usize::MAX) as i64
    );
    assert!(corpus.encode("Zounds").is_err(), "Z is not in this text");
    assert!(corpus.decode(&[vocab.len() as i64]).is_err());
    assert!(corpus.decode(&[-1]).is_err());
    let (train, val) = corpus.split();
    assert_eq!(train.len(), TEXT.len() * 9 / 10);
    assert_eq!(train.len() + val.len(), TEXT.len());
    assert_eq!(&train[..], &corpus.tokens()[..train.len()]);
    assert!(CharCorpus::from_bytes(b"").is_err());
    Ok(())
}

#[test]
fn training_windows_are_next_token_pairs_drawn_the_same_for_any_worker_count(
) -> Result<(), DataError> {
    let corpus = CharCorpus::from_bytes(TEXT.as_bytes())?;
    let tokens = corpus.tokens().clone();
    let block = 8;
    let windows = Arc::new(RandomWindows::new(tokens.clone(), block, 40)?);
    assert_eq!(windows.len(), 40);
    let sample = windows.get(3)?;
    let (x, y) = (sample[0].to_vec::<i64>()?, sample[1].to_vec::<i64>()?);
    assert_eq!(x[1..], y[..block - 1], "y is x shifted by one");
    let start = windows.start(&mut SampleContext::new(0, 0, 3));
    assert!(start + block < tokens.len());
    let want: Vec<i64> = tokens[start..start + block]
        .iter()
        .map(|&t| i64::from(t))
        .collect();
    assert_eq!(x, want);
    let batches = |workers| -> Result<Vec<Vec<i64>>, DataError> {
        let mut loader = DataLoader::new(
            windows.clone(),
            LoaderOptions {
                batch_size: 4,
                seed: 11,
                num_workers: workers,
                ..LoaderOptions::default()
            },
        )?;
        let batches = loader
            .epoch()?
            .map(|b| Ok(b?.tensors[0].to_vec::<i64>()?))
            .collect::<Result<Vec<_>, DataError>>()?;
        Ok(batches)
    };
    let alone = batches(0)?;
    assert_eq!(alone.len(), 10);
    assert_eq!(alone, batches(3)?);
    // Windows need a next token: a block as long as the text is refused.
    assert!(RandomWindows::new(tokens.clone(), tokens.len(), 1).is_err());
    assert!(RandomWindows::new(tokens, 0, 1).is_err());
    Ok(())
}

#[test]
fn evaluation_windows_start_every_block_while_they_fit() -> Result<(), DataError> {
    let tokens: Arc<[u8]> = (0..=40u8).collect::<Vec<_>>().into();
    // 41 tokens, block 8: starts 0, 8, 16, 24, 32 (32 + 8 + 1 = 41 fits; 40 would not).
    let windows = EvalWindows::new(tokens.clone(), 8, 256)?;
    assert_eq!(windows.len(), 5);
    let last = windows.get(4)?;
    assert_eq!(last[0].to_vec::<i64>()?, (32..40).collect::<Vec<i64>>());
    assert_eq!(last[1].to_vec::<i64>()?, (33..41).collect::<Vec<i64>>());
    assert_eq!(EvalWindows::new(tokens.clone(), 8, 3)?.len(), 3);
    assert!(windows.get(5).is_err());
    assert!(EvalWindows::new(tokens, 41, 1).is_err());
    Ok(())
}

#[test]
fn the_shakespeare_corpus_is_42_texts_of_ascii() -> Result<(), DataError> {
    let dir = CharCorpus::default_dir().ok_or_else(|| DataError::Argument {
        what: "CharCorpus::default_dir",
        message: "neither XDG_CACHE_HOME nor HOME is set".to_owned(),
    })?;
    let corpus = CharCorpus::shakespeare(&dir)?;
    assert_eq!(corpus.tokens().len(), 5_057_198);
    assert_eq!(corpus.vocab().len(), 84);
    assert!(corpus.vocab().iter().all(u8::is_ascii));
    let (train, val) = corpus.split();
    assert_eq!(train.len(), 4_551_478);
    assert_eq!(val.len(), 505_720);
    // The validation protocol: 256 windows of 64.
    assert_eq!(EvalWindows::new(val, 64, 256)?.len(), 256);
    assert_eq!(corpus.decode(&corpus.encode("ROMEO:")?)?, "ROMEO:");
    // A directory without the texts names the script that fetches them.
    let err = CharCorpus::shakespeare(std::path::Path::new("/nonexistent")).unwrap_err();
    assert!(
        err.to_string().contains("scripts/fetch-shakespeare"),
        "{err}"
    );
    Ok(())
}
