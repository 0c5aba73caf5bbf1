//! The coordinator protocol (`proto/paraforge.proto`, package `paraforge.v1`),
//! generated at build time.

#![allow(clippy::all, missing_docs)]

tonic::include_proto!("paraforge.v1");

impl From<paraforge_job::bitext::Range> for Range {
    fn from(r: paraforge_job::bitext::Range) -> Range {
        Range {
            first_line: r.first_line,
            lines: r.lines,
            bytes: r.bytes.map(|(start, end)| ByteSpan { start, end }),
        }
    }
}

impl From<Range> for paraforge_job::bitext::Range {
    fn from(r: Range) -> paraforge_job::bitext::Range {
        paraforge_job::bitext::Range {
            first_line: r.first_line,
            lines: r.lines,
            bytes: r.bytes.map(|b| (b.start, b.end)),
        }
    }
}

/// Upper bounds, in seconds, of the batch-duration buckets that
/// [`WorkerMetrics::batch_buckets`] counts: fixed here rather than sent, so
/// a worker cannot make the coordinator show buckets of its choosing. From
/// a small model's batch on a GPU to a large one's on a few CPU cores.
pub const BATCH_SECONDS_BOUNDS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn lease_responses_round_trip_through_the_wire_format() {
        let r = LeaseShardResponse {
            result: Some(lease_shard_response::Result::Lease(Lease {
                shard: Some(ShardSpec {
                    shard_id: 7,
                    input_url: "s3://bucket/czeng.tsv".into(),
                    range: Some(
                        paraforge_job::bitext::Range::bytes(
                            1 << 33,
                            (1 << 33) + 4096,
                            51_000_001,
                            20,
                        )
                        .into(),
                    ),
                    ..Default::default()
                }),
                lease_token: 42,
                attempt: 2,
            })),
        };
        let back = LeaseShardResponse::decode(r.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back, r);
        let Some(lease_shard_response::Result::Lease(l)) = back.result else {
            panic!("a lease")
        };
        let range: paraforge_job::bitext::Range = l.shard.and_then(|s| s.range).unwrap().into();
        assert_eq!(
            range,
            paraforge_job::bitext::Range::bytes(1 << 33, (1 << 33) + 4096, 51_000_001, 20)
        );
        let lines = paraforge_job::bitext::Range::lines(7, 3);
        assert_eq!(
            paraforge_job::bitext::Range::from(Range::from(lines)),
            lines
        );
        let done = LeaseShardResponse {
            result: Some(lease_shard_response::Result::Done(true)),
        };
        assert_ne!(
            LeaseShardResponse::decode(done.encode_to_vec().as_slice()).unwrap(),
            r
        );
    }
}
