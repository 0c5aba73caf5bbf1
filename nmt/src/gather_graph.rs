//! A one-node ONNX graph, built in memory, that reorders the rows of the
//! KV-cache tensors where they live: `out_i = Gather(data_i, indices, axis 0)`
//! for every cache tensor at once. With I/O binding on a GPU the caches
//! never leave device memory between decoding steps; the beam reorder runs
//! as this graph on the same execution provider.
//!
//! Only the few fields of `onnx.proto` that such a graph needs are declared
//! (field numbers as upstream).

use prost::Message;

#[derive(Clone, PartialEq, prost::Message)]
struct ModelProto {
    #[prost(int64, tag = "1")]
    ir_version: i64,
    #[prost(string, tag = "2")]
    producer_name: String,
    #[prost(message, optional, tag = "7")]
    graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "8")]
    opset_import: Vec<OperatorSetId>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct OperatorSetId {
    #[prost(string, tag = "1")]
    domain: String,
    #[prost(int64, tag = "2")]
    version: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    name: String,
    #[prost(message, repeated, tag = "11")]
    input: Vec<ValueInfo>,
    #[prost(message, repeated, tag = "12")]
    output: Vec<ValueInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    output: Vec<String>,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(string, tag = "4")]
    op_type: String,
    #[prost(message, repeated, tag = "5")]
    attribute: Vec<Attribute>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Attribute {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(int64, tag = "3")]
    i: i64,
    /// AttributeType: INT = 2.
    #[prost(int32, tag = "20")]
    r#type: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ValueInfo {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    r#type: Option<TypeProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TypeProto {
    #[prost(message, optional, tag = "1")]
    tensor_type: Option<TensorType>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TensorType {
    /// TensorProto.DataType: FLOAT = 1, INT64 = 7.
    #[prost(int32, tag = "1")]
    elem_type: i32,
    #[prost(message, optional, tag = "2")]
    shape: Option<Shape>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Shape {
    #[prost(message, repeated, tag = "1")]
    dim: Vec<Dim>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Dim {
    #[prost(string, tag = "2")]
    dim_param: String,
}

fn tensor(name: &str, elem_type: i32, dims: &[&str]) -> ValueInfo {
    ValueInfo {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorType {
                elem_type,
                shape: Some(Shape {
                    dim: dims
                        .iter()
                        .map(|d| Dim {
                            dim_param: d.to_string(),
                        })
                        .collect(),
                }),
            }),
        }),
    }
}

pub(crate) fn data_name(i: usize) -> String {
    format!("data{i}")
}

pub(crate) fn out_name(i: usize) -> String {
    format!("out{i}")
}

pub(crate) const INDICES: &str = "indices";

/// The serialized model gathering rows of `n` float tensors of rank 4.
pub(crate) fn gather_model(n: usize) -> Vec<u8> {
    let mut g = GraphProto {
        name: "paraforge_cache_gather".into(),
        input: vec![tensor(INDICES, 7, &["rows_out"])],
        ..Default::default()
    };
    for i in 0..n {
        let dims = [
            format!("r{i}"),
            format!("h{i}"),
            format!("t{i}"),
            format!("d{i}"),
        ];
        let d: Vec<&str> = dims.iter().map(String::as_str).collect();
        g.input.push(tensor(&data_name(i), 1, &d));
        let od = ["rows_out", d[1], d[2], d[3]];
        g.output.push(tensor(&out_name(i), 1, &od));
        g.node.push(NodeProto {
            input: vec![data_name(i), INDICES.into()],
            output: vec![out_name(i)],
            name: format!("gather{i}"),
            op_type: "Gather".into(),
            attribute: vec![Attribute {
                name: "axis".into(),
                i: 0,
                r#type: 2,
            }],
        });
    }
    ModelProto {
        ir_version: 8,
        producer_name: "paraforge".into(),
        graph: Some(g),
        opset_import: vec![OperatorSetId {
            domain: String::new(),
            version: 13,
        }],
    }
    .encode_to_vec()
}
