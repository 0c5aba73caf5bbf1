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

/// `ShardSpec.drop_bitmap` for a shard whose range starts at `first_line`:
/// bit i, least significant first, marks line `first_line + i`; no
/// trailing zero bytes. Lines before `first_line` are not the shard's and
/// are left out.
pub fn drop_bitmap(first_line: u64, lines: &[u64]) -> Vec<u8> {
    let Some(last) = lines.iter().filter(|&&l| l >= first_line).max() else {
        return Vec::new();
    };
    let mut bits = vec![0u8; ((last - first_line) / 8 + 1) as usize];
    for &l in lines.iter().filter(|&&l| l >= first_line) {
        let i = l - first_line;
        bits[(i / 8) as usize] |= 1 << (i % 8);
    }
    bits
}

/// The lines a `drop_bitmap` marks, ascending; an error when one lies past
/// the range's `lines` (a range of 0 lines reads to the end of its file).
pub fn dropped_lines(range: &Range, bitmap: &[u8]) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for (byte, &b) in bitmap.iter().enumerate() {
        for bit in (0..8).filter(|bit| b & (1 << bit) != 0) {
            let i = byte as u64 * 8 + bit;
            if range.lines > 0 && i >= range.lines {
                return Err(format!(
                    "the drop bitmap marks line {} of a range of {} lines from line {}",
                    i + 1,
                    range.lines,
                    range.first_line
                ));
            }
            out.push(range.first_line + i);
        }
    }
    Ok(out)
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
    fn drop_bitmaps_round_trip_and_stay_within_a_bit_a_line() {
        let range = Range::from(paraforge_job::bitext::Range::lines(1001, 5000));
        for lines in [
            vec![],
            vec![1001],
            vec![1008, 1009, 6000],
            (1001..6001).collect(),
        ] {
            let bits = drop_bitmap(1001, &lines);
            assert!(bits.len() <= 5000 / 8, "{} bytes", bits.len());
            assert_ne!(bits.last(), Some(&0));
            assert_eq!(dropped_lines(&range, &bits).unwrap(), lines);
        }
        // Past the range: a lease no coordinator of this version sends.
        let e = dropped_lines(&range, &drop_bitmap(1001, &[6001])).unwrap_err();
        assert!(e.contains("line 5001 of a range of 5000 lines"), "{e}");
        // A range to the end of its file takes any line.
        let open = Range::from(paraforge_job::bitext::Range::lines(3, 0));
        assert_eq!(dropped_lines(&open, &drop_bitmap(3, &[90])).unwrap(), [90]);
    }

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
                model_sha256: "ab".repeat(32),
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
