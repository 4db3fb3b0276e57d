//! What a catalog's search index is built with besides the tools: the `search:` section of
//! `quiver.yaml`, loaded once ([`SearchSetup::load`]) and reused by every catalog rebuild.

use std::fmt;
use std::path::{Path, PathBuf};

use super::{SearchConfig, SearchDoc, SearchIndex};

/// The search settings of a host, loaded: the optional embedding model (feature `semantic`).
/// The default is lexical ranking only.
#[derive(Debug, Clone, Default)]
pub struct SearchSetup {
    #[cfg(feature = "semantic")]
    embedding: Option<std::sync::Arc<super::embed::StaticEmbedding>>,
    /// The ranker's configuration: the default, with the fusion weight of the settings.
    config: SearchConfig,
}

/// A search setting that cannot be used: the file at fault and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchSetupError {
    /// The file or folder at fault.
    pub file: PathBuf,
    /// What is wrong, and how to fix it.
    pub message: String,
}

impl fmt::Display for SearchSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.message)
    }
}

impl std::error::Error for SearchSetupError {}

impl SearchSetup {
    /// Loads the settings: `embedding`, a model2vec model folder (`model.safetensors` and
    /// `tokenizer.json`), or none. Nothing is downloaded. A model that cannot be read is an
    /// error naming the file; so is any model when the crate was built without the `semantic`
    /// feature (the error names the feature).
    pub fn load(embedding: Option<&Path>) -> Result<SearchSetup, SearchSetupError> {
        let Some(dir) = embedding else {
            return Ok(SearchSetup::default());
        };
        #[cfg(feature = "semantic")]
        {
            let model = super::embed::StaticEmbedding::load(dir)
                .map_err(|e| SearchSetupError { file: e.file, message: e.message })?;
            Ok(SearchSetup { embedding: Some(std::sync::Arc::new(model)), config: SearchConfig::default() })
        }
        #[cfg(not(feature = "semantic"))]
        Err(SearchSetupError {
            file: dir.to_owned(),
            message: "an embedding model is configured, but this build has no semantic ranking: rebuild with the \
                      `semantic` cargo feature (`cargo build --release -p quiver --features semantic`), or remove \
                      the setting to rank lexically"
                .to_owned(),
        })
    }

    /// The same setup with the model's vote in the fusion set to `weight` (the lexical
    /// ranking's being 1; `search.semantic_weight` of quiver.yaml, checked there to be 0 to 10).
    pub fn with_semantic_weight(mut self, weight: f32) -> SearchSetup {
        self.config.semantic_weight = weight;
        self
    }

    /// True when text search fuses an embedding model's ranking with the lexical one.
    pub fn has_embedding(&self) -> bool {
        #[cfg(feature = "semantic")]
        return self.embedding.is_some();
        #[cfg(not(feature = "semantic"))]
        false
    }

    /// The search index over `docs` with these settings.
    pub fn index(&self, docs: Vec<SearchDoc>) -> SearchIndex {
        let index = SearchIndex::build_with(docs, self.config.clone());
        #[cfg(feature = "semantic")]
        if let Some(model) = &self.embedding {
            return index.with_embedding(model.clone());
        }
        index
    }
}
