//! The deployment files (deploy/): the container image built with podman
//! and run, a Slurm job through the sbatch script on a one-node cluster,
//! and the files agreeing with the Makefile. The image and Slurm tests run
//! scripts under deploy/ and skip, saying why, where podman or Slurm is not
//! installed (as in CI) or we are not root.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use paraforge_tests::{model, output_rows, paraforge_bin, paraforge_ok, repo_root, sample_lines};

/// Runs a deploy/ check script; None (after printing its reason) when it
/// exits 77, meaning the tool it needs is not here. Panics on any other
/// failure, with its output.
fn run_check(script: &str, args: &[&Path], envs: &[(&str, &Path)]) -> Option<String> {
    let mut c = Command::new(repo_root().join(script));
    c.args(args).stdin(Stdio::null());
    for (k, v) in envs {
        c.env(k, v);
    }
    let o = c
        .output()
        .unwrap_or_else(|e| panic!("starting {script}: {e}"));
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr);
    if o.status.code() == Some(77) {
        let reason = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with("SKIPPED:"))
            .unwrap_or("SKIPPED: (no reason given)");
        eprintln!("{reason} ({script})");
        return None;
    }
    assert!(
        o.status.success(),
        "{script} failed ({}):\n{stdout}\n{stderr}",
        o.status
    );
    eprintln!("{stdout}");
    Some(stdout)
}

/// The directory of the ONNX Runtime library the tests use (the Makefile
/// sets ORT_DYLIB_PATH), for the image.
fn ort_dir() -> Option<PathBuf> {
    let lib = PathBuf::from(std::env::var_os("ORT_DYLIB_PATH")?);
    Some(lib.parent()?.to_path_buf())
}

/// The CPU image holds a working binary, library and model: `--version` and
/// a translation in the container equal the host binary's.
#[test]
fn image_runs_version_and_translate() {
    let dir = tempfile::tempdir().unwrap();
    let (lines, _) = sample_lines(4);
    let cs: Vec<&str> = lines
        .iter()
        .map(|l| l.split('\t').nth(2).unwrap())
        .collect();
    let input = dir.path().join("input.cs");
    std::fs::write(&input, cs.join("\n") + "\n").unwrap();
    let bin = paraforge_bin();
    let ort = ort_dir();
    let mut envs = vec![("PARAFORGE_BIN", bin.as_path())];
    if let Some(ort) = &ort {
        envs.push(("ORT_DIR", ort.as_path()));
    }
    let Some(_) = run_check("deploy/docker/check-image.sh", &[dir.path()], &envs) else {
        return;
    };
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    assert_eq!(read("version.txt"), paraforge_ok(&["--version"]));
    let host = paraforge_ok(&[
        "translate".as_ref(),
        "--model".as_ref(),
        model("tiny-cs-en").as_os_str(),
        "--beam".as_ref(),
        "2".as_ref(),
        "--threads".as_ref(),
        "1".as_ref(),
        input.as_os_str(),
    ]);
    let image = read("translation.txt");
    assert_eq!(image.lines().count(), cs.len());
    assert_eq!(image, host, "the image translates as the host binary does");
}

/// paraforge-cpu.sbatch on a one-node Slurm cluster: the coordinator in the
/// batch script, two workers through srun, 40 sample pairs in 4 shards;
/// the output is complete (_SUCCESS, the manifest's 40 pairs) and both
/// workers ran.
#[test]
fn slurm_cpu_job_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let (lines, _) = sample_lines(40);
    let input = dir.path().join("input.tsv");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("out");
    let job = dir.path().join("job.toml");
    let root = repo_root();
    std::fs::write(
        &job,
        format!(
            "[job]\nname = \"slurm-check\"\noutput = \"{}\"\nshard_pairs = 10\nlease_seconds = 60\n\n\
             [input]\npaths = [\"{}\"]\nformat = \"czeng16\"\n\n\
             [model]\ndir = \"{}\"\ndevice = \"cpu\"\nthreads = 1\nbeam = 2\nmax_new_tokens = 48\n\n\
             [scoring]\nvectors = \"{}\"\n\n\
             [coordinator]\nlisten = \"0.0.0.0:0\"\nmetrics = \"127.0.0.1:0\"\n\n\
             [workers]\nlocal = 0\n",
            out.display(),
            input.display(),
            model("tiny-cs-en").display(),
            root.join("data/vectors/glove.6B.50d.top25k.txt.gz").display(),
        ),
    )
    .unwrap();
    let bin = paraforge_bin();
    let Some(log) = run_check(
        "deploy/slurm/check-local.sh",
        &[dir.path(), &job],
        &[("PARAFORGE", &bin)],
    ) else {
        return;
    };
    assert!(out.join("_SUCCESS").is_file(), "no _SUCCESS:\n{log}");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("_manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["pairs"], 40, "{manifest}");
    assert_eq!(manifest["shards_committed"], 4, "{manifest}");
    assert_eq!(output_rows(&out).len(), 40);
    assert_eq!(
        log.matches("worker done:").count(),
        2,
        "both srun tasks ran a worker to the end:\n{log}"
    );
}

/// What the images and manifests name agrees with the Makefile: the ONNX
/// Runtime version, the tags `make image` and `make image-cuda` give, and
/// the scripts parse. Runs everywhere (no tools needed beyond bash).
#[test]
fn deploy_files_agree_with_the_makefile() {
    let root = repo_root();
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let makefile = read("Makefile");
    let ort = makefile
        .lines()
        .find_map(|l| l.strip_prefix("ORT_VERSION"))
        .and_then(|l| l.split("?=").nth(1))
        .map(str::trim)
        .expect("ORT_VERSION in the Makefile");
    let cargo: toml::Value = toml::from_str(&read("Cargo.toml")).unwrap();
    let version = cargo["workspace"]["package"]["version"].as_str().unwrap();

    for f in ["deploy/docker/Dockerfile", "deploy/docker/Dockerfile.cuda"] {
        let text = read(f);
        assert!(
            text.contains(&format!(
                "ORT_DYLIB_PATH=/opt/onnxruntime/libonnxruntime.so.{ort}"
            )),
            "{f} sets ORT_DYLIB_PATH to the Makefile's ONNX Runtime {ort}"
        );
        assert!(text.contains("ARG BASE="), "{f} takes its base as ARG BASE");
    }
    let build = read("deploy/docker/build.sh");
    assert!(build.contains(&format!("ort_version={ort}")));

    let images = |f: &str| -> Vec<String> {
        read(f)
            .lines()
            .filter_map(|l| l.trim().strip_prefix("image: "))
            .map(|s| s.trim().to_string())
            .collect()
    };
    assert_eq!(
        images("deploy/k8s/coordinator.yaml"),
        [format!("paraforge:{version}")]
    );
    assert_eq!(
        images("deploy/k8s/workers-cpu.yaml"),
        [format!("paraforge:{version}")]
    );
    assert_eq!(
        images("deploy/k8s/workers.yaml"),
        [format!("paraforge:{version}-cuda")]
    );
    let workers = read("deploy/k8s/workers.yaml");
    assert!(workers.contains("nvidia.com/gpu: 1") && workers.contains("\"--device\", \"cuda:0\""));
    assert!(makefile.contains("IMAGE         ?= paraforge:$(VERSION)"));
    assert!(makefile.contains("IMAGE_CUDA    ?= paraforge:$(VERSION)-cuda"));

    for s in [
        "deploy/docker/build.sh",
        "deploy/docker/check-image.sh",
        "deploy/docker/debian-base.sh",
        "deploy/slurm/paraforge-cpu.sbatch",
        "deploy/slurm/paraforge-gpu.sbatch",
        "deploy/slurm/local-cluster.sh",
        "deploy/slurm/check-local.sh",
    ] {
        let ok = Command::new("bash")
            .arg("-n")
            .arg(root.join(s))
            .status()
            .unwrap()
            .success();
        assert!(ok, "{s} does not parse");
    }
    let gpu = read("deploy/slurm/paraforge-gpu.sbatch");
    assert!(gpu.contains("--device \"$device\"") && gpu.contains("cuda:$SLURM_LOCALID"));
}
