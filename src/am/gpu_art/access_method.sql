-- The gpu_art access method: its handler (emitted by index_am!) and
-- operator classes. Strategies are btree's (1 <, 2 <=, 3 =, 4 >=, 5 >),
-- so the planner maps the index order onto btree's sort order for
-- ORDER BY, and 6 is text's prefix operator ^@ (which also lets
-- PostgreSQL's LIKE support turn LIKE 'abc%' into a prefix search).
-- Text is indexed in the C collation only (CREATE INDEX says so otherwise).

CREATE FUNCTION gpu_art_handler(internal) RETURNS index_am_handler
    PARALLEL SAFE IMMUTABLE STRICT LANGUAGE c
    AS 'MODULE_PATHNAME', 'gpu_art_handler_wrapper';
CREATE ACCESS METHOD gpu_art TYPE INDEX HANDLER gpu_art_handler;
COMMENT ON ACCESS METHOD gpu_art IS 'B-link tree of byte-comparable variable-length keys (text in C order, bytea, uuid): =, ranges, ^@ prefixes, = ANY as one sorted walk';

CREATE OPERATOR CLASS text_ops DEFAULT FOR TYPE text USING gpu_art AS
    OPERATOR 1 <,
    OPERATOR 2 <=,
    OPERATOR 3 =,
    OPERATOR 4 >=,
    OPERATOR 5 >,
    OPERATOR 6 ^@ (text, text);

CREATE OPERATOR CLASS bytea_ops DEFAULT FOR TYPE bytea USING gpu_art AS
    OPERATOR 1 <,
    OPERATOR 2 <=,
    OPERATOR 3 =,
    OPERATOR 4 >=,
    OPERATOR 5 >;

CREATE OPERATOR CLASS uuid_ops DEFAULT FOR TYPE uuid USING gpu_art AS
    OPERATOR 1 <,
    OPERATOR 2 <=,
    OPERATOR 3 =,
    OPERATOR 4 >=,
    OPERATOR 5 >;
