//! Training on a wgpu adapter (`--device wgpu`) computes what training on
//! the CPU computes: the same pairs, seed and options give the same losses
//! and embeddings up to float rounding. Built with `--features wgpu`; where
//! no Vulkan (or Metal) adapter exists the test says so and passes, because
//! CI compiles it on machines without one. Here it runs on Mesa's lavapipe
//! (`apt-get install mesa-vulkan-drivers`), a Vulkan device on the CPU.

use paraforge_core::Vectors;
use paraforge_tests::repo_root;
use paraforge_trainer::data::PairSource;
use paraforge_trainer::neural::{default_lambdas, default_sampling, Spec};
use paraforge_trainer::nn_model::{cpu, device, NeuralModel};
use paraforge_trainer::nn_train::{train, NeuralOptions};
use paraforge_trainer::train::TrainOptions;
use paraforge_trainer::Kind;

/// The device to test: `wgpu:cpu` (a software adapter such as lavapipe),
/// or `wgpu` (the adapter wgpu ranks first) with PARAFORGE_TEST_WGPU_GPU
/// set; None where `vulkaninfo` finds no Vulkan driver (burn would panic
/// opening a device, so the check is made outside this process).
fn adapter() -> Option<&'static str> {
    let has_vulkan = std::process::Command::new("vulkaninfo")
        .arg("--summary")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !has_vulkan {
        eprintln!("skipped: no Vulkan adapter (vulkaninfo --summary failed or is absent)");
        return None;
    }
    Some(if std::env::var("PARAFORGE_TEST_WGPU_GPU").is_ok() {
        "wgpu"
    } else {
        "wgpu:cpu"
    })
}

#[test]
fn training_on_wgpu_equals_training_on_the_cpu() {
    let Some(name) = adapter() else { return };
    let gpu = device(name).unwrap();
    let dir = tempfile::tempdir().unwrap();
    paraforge_tests::scored_dataset_with(dir.path(), 200, 1, "demo-cs-en", 2);
    let source = PairSource::open(dir.path()).unwrap();
    let v = Vectors::load(&repo_root().join("data/vectors/glove.6B.50d.top25k.txt.gz"))
        .unwrap()
        .0;
    let words = paraforge_trainer::train::word_vocab(&source, 1, 50_000).unwrap();
    let probe = [
        "a man is playing a guitar .",
        "the cat sleeps",
        "zzzq unknown",
    ];
    for spec in ["lstm", "rnn", "blstm-max"] {
        let spec: Spec = spec.parse().unwrap();
        let run = |dev: &paraforge_trainer::nn_model::Device| {
            let (wm, _) = paraforge_trainer::model::init_with_words(
                Kind::Word,
                words.clone(),
                50,
                Some(&v),
                vec![],
                0,
                1,
            )
            .unwrap();
            let mut m = NeuralModel::init_spec(&spec, wm, 50, 1, 1, dev).unwrap();
            let o = NeuralOptions {
                base: TrainOptions {
                    batch_size: 50,
                    megabatch: 2,
                    epochs: 2,
                    lr: 0.005,
                    shuffle_buffer: 200,
                    ..TrainOptions::default()
                },
                sampling: default_sampling(&spec),
                lambda_c: default_lambdas(&spec).0,
                lambda_w: default_lambdas(&spec).1,
                ..NeuralOptions::default()
            };
            let rep = train(&mut m, &source, &o, dev, None, &mut |_| {}).unwrap();
            let losses: Vec<f64> = rep.epochs.iter().map(|e| e.mean_loss).collect();
            (losses, m.embed_many(&probe))
        };
        let (cpu_loss, cpu_emb) = run(&cpu());
        let (gpu_loss, gpu_emb) = run(&gpu);
        eprintln!("{spec}: cpu losses {cpu_loss:.5?}, {name} {gpu_loss:.5?}");
        assert_eq!(cpu_loss.len(), gpu_loss.len(), "{spec}: epochs");
        for (a, b) in cpu_loss.iter().zip(&gpu_loss) {
            assert!(
                (a - b).abs() <= 1e-3 * a.abs().max(1.0),
                "{spec}: loss {a} vs {b}"
            );
        }
        let mut worst = 0f32;
        for (a, b) in cpu_emb.iter().zip(&gpu_emb) {
            let cos = paraforge_core::score::cosine(a, b);
            worst = worst.max(1.0 - cos);
        }
        eprintln!("{spec}: largest 1 - cosine(cpu, {name}) over the probes {worst:e}");
        assert!(
            worst <= 1e-3,
            "{spec}: embeddings differ, 1 - cosine {worst}"
        );
    }
}
