//! Optional semantic ranking: a local static-embedding model in the model2vec format, fused with
//! the lexical ranking by reciprocal rank fusion.
//!
//! A model is a folder with `model.safetensors` (one `f32` tensor `embeddings` of shape
//! `[vocabulary, dimensions]`: row `i` is the vector of token `i`) and `tokenizer.json` (a
//! Hugging Face tokenizer). A text's vector is the mean of its tokens' rows (special tokens not
//! added), normalised to unit length. Nothing is ever downloaded: the model is read from the
//! configured folder or not at all.

use std::fmt;
use std::path::{Path, PathBuf};

/// The tensor holding the token vectors (model2vec's name for it).
pub const EMBEDDINGS_TENSOR: &str = "embeddings";
/// The weights file of a model folder.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The tokenizer file of a model folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// Longest text embedded, in bytes (longer text is cut at a character boundary).
const MAX_TEXT: usize = 4096;

/// A model that could not be loaded: the file at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingError {
    /// The file (or folder) at fault.
    pub file: PathBuf,
    /// What is wrong, and how to fix it.
    pub message: String,
}

impl fmt::Display for EmbeddingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.message)
    }
}

impl std::error::Error for EmbeddingError {}

/// A loaded static-embedding model.
pub struct StaticEmbedding {
    tokenizer: tokenizers::Tokenizer,
    /// Row-major `[rows, dim]`.
    vectors: Vec<f32>,
    rows: usize,
    dim: usize,
}

impl fmt::Debug for StaticEmbedding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticEmbedding").field("rows", &self.rows).field("dim", &self.dim).finish()
    }
}

impl StaticEmbedding {
    /// Loads the model in folder `dir` ([`WEIGHTS_FILE`] and [`TOKENIZER_FILE`]).
    pub fn load(dir: &Path) -> Result<StaticEmbedding, EmbeddingError> {
        let err = |file: PathBuf, message: String| EmbeddingError { file, message };
        if !dir.is_dir() {
            return Err(err(
                dir.to_owned(),
                format!(
                    "not a folder; an embedding model is a model2vec model folder holding {WEIGHTS_FILE} and {TOKENIZER_FILE}"
                ),
            ));
        }
        let weights_path = dir.join(WEIGHTS_FILE);
        let bytes = std::fs::read(&weights_path)
            .map_err(|e| err(weights_path.clone(), format!("cannot read the model weights: {e}")))?;
        let tensors = safetensors::SafeTensors::deserialize(&bytes)
            .map_err(|e| err(weights_path.clone(), format!("not a safetensors file: {e}")))?;
        let view = tensors.tensor(EMBEDDINGS_TENSOR).map_err(|_| {
            err(weights_path.clone(), format!("no tensor named `{EMBEDDINGS_TENSOR}` (a model2vec model has one)"))
        })?;
        if view.dtype() != safetensors::Dtype::F32 {
            return Err(err(
                weights_path.clone(),
                format!(
                    "tensor `{EMBEDDINGS_TENSOR}` is {:?}; only F32 is supported (convert the model to float32)",
                    view.dtype()
                ),
            ));
        }
        let [rows, dim] = view.shape() else {
            return Err(err(
                weights_path.clone(),
                format!("tensor `{EMBEDDINGS_TENSOR}` has shape {:?}; expected [vocabulary, dimensions]", view.shape()),
            ));
        };
        let (rows, dim) = (*rows, *dim);
        if rows == 0 || dim == 0 {
            return Err(err(weights_path, format!("tensor `{EMBEDDINGS_TENSOR}` is empty ({rows} x {dim})")));
        }
        let vectors: Vec<f32> =
            view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let tokenizer_path = dir.join(TOKENIZER_FILE);
        let mut tokenizer = tokenizers::Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| err(tokenizer_path.clone(), format!("not a usable tokenizer.json: {e}")))?;
        // A text's vector is the mean of its own tokens: no padding tokens (a tokenizer exported
        // from a sentence encoder often pads to a fixed length), no cut at the encoder's length.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| err(tokenizer_path.clone(), format!("cannot turn off truncation: {e}")))?;
        let vocab = tokenizer.get_vocab_size(true);
        if vocab > rows {
            return Err(err(
                tokenizer_path,
                format!("the tokenizer has {vocab} tokens but {WEIGHTS_FILE} only {rows} rows: not the same model"),
            ));
        }
        Ok(StaticEmbedding { tokenizer, vectors, rows, dim })
    }

    /// Number of dimensions of a vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The unit-length mean vector of `text`'s tokens; `None` when no token of it is known.
    pub fn embed(&self, text: &str) -> Option<Vec<f32>> {
        let mut end = text.len().min(MAX_TEXT);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let encoding = self.tokenizer.encode(&text[..end], false).ok()?;
        let mut sum = vec![0f32; self.dim];
        let mut count = 0usize;
        for &id in encoding.get_ids() {
            let row = id as usize;
            if row >= self.rows {
                continue;
            }
            for (s, v) in sum.iter_mut().zip(&self.vectors[row * self.dim..(row + 1) * self.dim]) {
                *s += v;
            }
            count += 1;
        }
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
        if count == 0 || norm == 0.0 {
            return None;
        }
        sum.iter_mut().for_each(|x| *x /= norm);
        Some(sum)
    }
}

/// The dot product of two vectors of the same length. Eight running sums instead of one, so that
/// the additions do not wait on each other and the compiler can use vector instructions (a single
/// `f32` sum must be added in order). With one sum, the cosine over 1,437 tools of 256
/// dimensions and the request's tokenising took about 420 µs per query.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    debug_assert_eq!(a.len(), b.len());
    let mut sums = [0f32; LANES];
    let mut a_chunks = a.chunks_exact(LANES);
    let mut b_chunks = b.chunks_exact(LANES);
    for (x, y) in a_chunks.by_ref().zip(b_chunks.by_ref()) {
        for ((s, x), y) in sums.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    sums.iter().sum::<f32>() + tail
}
