//! The job's `[scoring] bootstrap` step, as the coordinator runs it after
//! finalizing: the rescore crate's cross-fitted scoring on the job's
//! output, into `scoring.bootstrap_output`.

use paraforge_coordinator::bootstrap::{BootstrapRun, ScoreStep, Scored};
use paraforge_rescore::bootstrap::{score, Bootstrap, Target};

pub struct Step;

impl ScoreStep for Step {
    fn score(
        &self,
        run: &BootstrapRun,
    ) -> Result<Scored, Box<dyn std::error::Error + Send + Sync>> {
        let kind: paraforge_trainer::Kind = run
            .kind
            .parse()
            .map_err(|_| format!("{:?}: trigram, word or word,trigram", run.kind))?;
        let b = Bootstrap {
            kind,
            folds: run.folds,
            epochs: run
                .epochs
                .unwrap_or(paraforge_trainer::bootstrap::DEFAULT_EPOCHS),
            seed: 1,
        };
        let bar = indicatif::ProgressBar::new(0).with_style(
            indicatif::ProgressStyle::with_template(
                "bootstrap: scoring {bar:30} {human_pos}/{human_len} pairs ({per_sec}, eta {eta})",
            )
            .expect("valid template"),
        );
        // The job's own scored corpus: a rerun writes it again.
        let t = Target {
            out: &run.out,
            input_name: None,
            classifier: None,
            overwrite: true,
        };
        let m = score(
            &run.translated,
            &b,
            t,
            &mut crate::dataset::announce,
            &|p| match p {
                paraforge_rescore::Progress::Total(n) => bar.set_length(n),
                paraforge_rescore::Progress::Done(n) => bar.inc(n),
            },
        )?;
        bar.finish_and_clear();
        Ok(Scored {
            out: run.out.clone(),
            rows: m.rows,
            mean: m.mean_after,
            models: m.folds.into_iter().map(|f| (f.model, f.sha256)).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    /// The job config accepts the encoders by name before the trainer
    /// sees them: every name it accepts must be one the trainer parses.
    #[test]
    fn every_bootstrap_the_config_accepts_is_an_encoder_the_trainer_has() {
        for k in paraforge_job::config::BOOTSTRAP_KINDS {
            assert!(k.parse::<paraforge_trainer::Kind>().is_ok(), "{k}");
        }
    }
}
