//! Where a coordinator is in its job's life, as `/status` and `/metrics`
//! show it from the moment their port is bound to the moment the process
//! ends. At CzEng's size the coordinator spends minutes where no worker is
//! served: planning reads every input, a resume fingerprints it again and
//! hashes every committed file, and the end hashes them once more and reads
//! every row back for the summary and the bins. A probe that gets no answer
//! then cannot tell a busy coordinator from a dead one, so the pages are up
//! throughout and say which of these it is doing.

/// A step of the job's life, in the order they come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A new job: reading every input to plan its shards (and, with
    /// `[filters] dedup_sources`, to find repeated sources).
    Planning,
    /// A job started again on its state: checking its config, inputs,
    /// model and committed files against the plan.
    Resuming,
    /// Leasing shards to workers (and telling them `done` at the end).
    Serving,
    /// Every shard committed or failed: checking every committed file and
    /// writing `_manifest.json`, then `_SUCCESS`.
    Finalizing,
    /// `[scoring] bootstrap`: training the fold models on the finalized
    /// output and scoring it into a new dataset.
    Bootstrapping,
    /// Output finalized: reading it back for the summary and the bins.
    ReadingBack,
}

impl Phase {
    pub const ALL: [Phase; 6] = [
        Phase::Planning,
        Phase::Resuming,
        Phase::Serving,
        Phase::Finalizing,
        Phase::Bootstrapping,
        Phase::ReadingBack,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Planning => "planning",
            Phase::Resuming => "resuming",
            Phase::Serving => "serving",
            Phase::Finalizing => "finalizing",
            Phase::Bootstrapping => "bootstrapping",
            Phase::ReadingBack => "reading_back",
        }
    }
}
