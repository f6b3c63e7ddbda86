-- The gpu_metric access method: its handler (emitted by index_am!), the
-- distance operators on real[] and text, the balls of each distance with
-- their "inside" operators, and one operator class per distance: its
-- ordering operator (strategy 1 L2, 2 L1, 3 cosine, 5 edit distance: the
-- number names the metric) and its ball operator (strategy 4).

CREATE OPERATOR <-> (LEFTARG = real[], RIGHTARG = real[], FUNCTION = gpu_metric_l2_distance, COMMUTATOR = '<->');
CREATE OPERATOR <+> (LEFTARG = real[], RIGHTARG = real[], FUNCTION = gpu_metric_l1_distance, COMMUTATOR = '<+>');
CREATE OPERATOR <=> (LEFTARG = real[], RIGHTARG = real[], FUNCTION = gpu_metric_cosine_distance, COMMUTATOR = '<=>');
-- Edit distance: fuzzystrmatch's levenshtein(a, b), as float8.
CREATE OPERATOR <~> (LEFTARG = text, RIGHTARG = text, FUNCTION = gpu_metric_edit_distance, COMMUTATOR = '<~>');

-- v <@ l2_ball(q, r): the distance from v to q is at most r. One ball
-- type per distance, so that an index answers only balls of its own.
CREATE OPERATOR <@ (LEFTARG = real[], RIGHTARG = l2_ball, FUNCTION = gpu_metric_in_l2_ball, RESTRICT = contsel, JOIN = contjoinsel);
CREATE OPERATOR <@ (LEFTARG = real[], RIGHTARG = l1_ball, FUNCTION = gpu_metric_in_l1_ball, RESTRICT = contsel, JOIN = contjoinsel);
CREATE OPERATOR <@ (LEFTARG = real[], RIGHTARG = cosine_ball, FUNCTION = gpu_metric_in_cosine_ball, RESTRICT = contsel, JOIN = contjoinsel);
CREATE OPERATOR <@ (LEFTARG = text, RIGHTARG = levenshtein_ball, FUNCTION = gpu_metric_in_levenshtein_ball, RESTRICT = contsel, JOIN = contjoinsel);

CREATE FUNCTION gpu_metric_handler(internal) RETURNS index_am_handler
    PARALLEL SAFE IMMUTABLE STRICT LANGUAGE c
    AS 'MODULE_PATHNAME', 'gpu_metric_handler_wrapper';
CREATE ACCESS METHOD gpu_metric TYPE INDEX HANDLER gpu_metric_handler;
COMMENT ON ACCESS METHOD gpu_metric IS 'GTS pivot tree over real[] vectors and text: exact nearest neighbours by L2, L1, cosine or edit distance';

CREATE OPERATOR CLASS real_l2_ops DEFAULT FOR TYPE real[] USING gpu_metric AS
    OPERATOR 1 <-> (real[], real[]) FOR ORDER BY float_ops,
    OPERATOR 4 <@ (real[], l2_ball);
CREATE OPERATOR CLASS real_l1_ops FOR TYPE real[] USING gpu_metric AS
    OPERATOR 2 <+> (real[], real[]) FOR ORDER BY float_ops,
    OPERATOR 4 <@ (real[], l1_ball);
CREATE OPERATOR CLASS real_cosine_ops FOR TYPE real[] USING gpu_metric AS
    OPERATOR 3 <=> (real[], real[]) FOR ORDER BY float_ops,
    OPERATOR 4 <@ (real[], cosine_ball);
CREATE OPERATOR CLASS text_levenshtein_ops DEFAULT FOR TYPE text USING gpu_metric AS
    OPERATOR 5 <~> (text, text) FOR ORDER BY float_ops,
    OPERATOR 4 <@ (text, levenshtein_ball);
