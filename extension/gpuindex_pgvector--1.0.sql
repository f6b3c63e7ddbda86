-- gpuindex_pgvector: gpu_metric on pgvector's vector (pgvector 0.7 or newer,
-- for <+>). Indexes order by pgvector's own operators, so existing queries
-- (ORDER BY v <-> q LIMIT k) use them unchanged; balls and batch functions
-- as for real[] (src/am/gpu_metric/pgvector.rs).
\echo Use "CREATE EXTENSION gpuindex_pgvector CASCADE" to load this file. \quit

-- v <@ l2_ball(q::real[], r): the index's distance from v to q is at most r.
CREATE FUNCTION gpu_metric_vector_in_l2_ball(vector, l2_ball) RETURNS bool
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'gpu_metric_vector_in_l2_ball_wrapper';
CREATE FUNCTION gpu_metric_vector_in_l1_ball(vector, l1_ball) RETURNS bool
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'gpu_metric_vector_in_l1_ball_wrapper';
CREATE FUNCTION gpu_metric_vector_in_cosine_ball(vector, cosine_ball) RETURNS bool
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'gpu_metric_vector_in_cosine_ball_wrapper';
CREATE OPERATOR <@ (LEFTARG = vector, RIGHTARG = l2_ball, FUNCTION = gpu_metric_vector_in_l2_ball, RESTRICT = contsel, JOIN = contjoinsel);
CREATE OPERATOR <@ (LEFTARG = vector, RIGHTARG = l1_ball, FUNCTION = gpu_metric_vector_in_l1_ball, RESTRICT = contsel, JOIN = contjoinsel);
CREATE OPERATOR <@ (LEFTARG = vector, RIGHTARG = cosine_ball, FUNCTION = gpu_metric_vector_in_cosine_ball, RESTRICT = contsel, JOIN = contjoinsel);

-- The same names as pgvector's classes for hnsw and ivfflat (each access
-- method has its own): strategy 1 L2, 2 L1, 3 cosine; 4 the ball.
CREATE OPERATOR CLASS vector_l2_ops DEFAULT FOR TYPE vector USING gpu_metric AS
    OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
    OPERATOR 4 <@ (vector, l2_ball);
CREATE OPERATOR CLASS vector_l1_ops FOR TYPE vector USING gpu_metric AS
    OPERATOR 2 <+> (vector, vector) FOR ORDER BY float_ops,
    OPERATOR 4 <@ (vector, l1_ball);
CREATE OPERATOR CLASS vector_cosine_ops FOR TYPE vector USING gpu_metric AS
    OPERATOR 3 <=> (vector, vector) FOR ORDER BY float_ops,
    OPERATOR 4 <@ (vector, cosine_ball);

-- Batch functions: gpu_metric_knn and gpu_metric_within on vector[].
CREATE FUNCTION gpu_metric_knn_vector(index regclass, queries vector[], k int) RETURNS TABLE (ord bigint, ctid tid, distance float8)
    VOLATILE PARALLEL SAFE STRICT SUPPORT gpuindex_batch_rows LANGUAGE c AS 'MODULE_PATHNAME', 'gpu_metric_knn_wrapper';
CREATE FUNCTION gpu_metric_within_vector(index regclass, queries vector[], radius float8) RETURNS TABLE (ord bigint, ctid tid, distance float8)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', 'gpu_metric_within_wrapper';
