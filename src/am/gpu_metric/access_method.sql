-- The gpu_metric access method: its handler (emitted by index_am!), the
-- distance operators on real[] and one operator class per distance.
-- Each operator class has one ordering operator; its strategy number
-- names the metric (1 L2, 2 L1, 3 cosine).

CREATE OPERATOR <-> (LEFTARG = real[], RIGHTARG = real[], FUNCTION = gpu_metric_l2_distance, COMMUTATOR = '<->');
CREATE OPERATOR <+> (LEFTARG = real[], RIGHTARG = real[], FUNCTION = gpu_metric_l1_distance, COMMUTATOR = '<+>');
CREATE OPERATOR <=> (LEFTARG = real[], RIGHTARG = real[], FUNCTION = gpu_metric_cosine_distance, COMMUTATOR = '<=>');

CREATE FUNCTION gpu_metric_handler(internal) RETURNS index_am_handler
    PARALLEL SAFE IMMUTABLE STRICT LANGUAGE c
    AS 'MODULE_PATHNAME', 'gpu_metric_handler_wrapper';
CREATE ACCESS METHOD gpu_metric TYPE INDEX HANDLER gpu_metric_handler;
COMMENT ON ACCESS METHOD gpu_metric IS 'GTS pivot tree over real[] vectors: exact nearest neighbours by L2, L1 or cosine distance';

CREATE OPERATOR CLASS real_l2_ops DEFAULT FOR TYPE real[] USING gpu_metric AS
    OPERATOR 1 <-> (real[], real[]) FOR ORDER BY float_ops;
CREATE OPERATOR CLASS real_l1_ops FOR TYPE real[] USING gpu_metric AS
    OPERATOR 2 <+> (real[], real[]) FOR ORDER BY float_ops;
CREATE OPERATOR CLASS real_cosine_ops FOR TYPE real[] USING gpu_metric AS
    OPERATOR 3 <=> (real[], real[]) FOR ORDER BY float_ops;
