//! G-PICS (Lewis & Tu): GPU-based spatial indexing and batched query
//! processing over 2-D points. A PR quadtree built level by level with one
//! thread per point; queries processed many at a time in two steps (Step I
//! registers each query with the leaves it touches, Step II processes each
//! leaf's query list against the leaf's points); range, within-distance,
//! point and kNN queries, with PostgreSQL's exact point semantics.

pub mod geom;
pub mod gpu;
pub mod knn;
pub mod query;
pub mod tree;
pub mod update;

pub use geom::{Query, Rect};
pub use knn::Neighbors;
pub use query::Hits;
pub use tree::{Params, Points, QuadTree};
