-- The gpu_learned access method: its handler (emitted by index_am!) and
-- operator classes.

CREATE FUNCTION gpu_learned_handler(internal) RETURNS index_am_handler
    PARALLEL SAFE IMMUTABLE STRICT LANGUAGE c
    AS 'MODULE_PATHNAME', 'gpu_learned_handler_wrapper';
CREATE ACCESS METHOD gpu_learned TYPE INDEX HANDLER gpu_learned_handler;
COMMENT ON ACCESS METHOD gpu_learned IS 'G-Learned index: a packed run of sorted pages searched through a PGM model (on the GPU for batches), inserts in a B-link delta';

-- gpu_learned operator families and classes, as gpu_btree's. One family per encoding:
-- the integer types share one (every cross-type comparison is exact on
-- int8 codes), the float types another; the date/time types stand alone.
-- Strategies are btree's (1 <, 2 <=, 3 =, 4 >=, 5 >), so the planner maps
-- the index order onto btree's sort order for ORDER BY.

CREATE OPERATOR FAMILY integer_ops USING gpu_learned;

CREATE OPERATOR CLASS int2_ops DEFAULT FOR TYPE int2 USING gpu_learned FAMILY integer_ops AS
    OPERATOR 1 <,
    OPERATOR 2 <=,
    OPERATOR 3 =,
    OPERATOR 4 >=,
    OPERATOR 5 >;

CREATE OPERATOR CLASS int4_ops DEFAULT FOR TYPE int4 USING gpu_learned FAMILY integer_ops AS
    OPERATOR 1 <,
    OPERATOR 2 <=,
    OPERATOR 3 =,
    OPERATOR 4 >=,
    OPERATOR 5 >;

CREATE OPERATOR CLASS int8_ops DEFAULT FOR TYPE int8 USING gpu_learned FAMILY integer_ops AS
    OPERATOR 1 <,
    OPERATOR 2 <=,
    OPERATOR 3 =,
    OPERATOR 4 >=,
    OPERATOR 5 >;

ALTER OPERATOR FAMILY integer_ops USING gpu_learned ADD
    OPERATOR 1 < (int2, int4),
    OPERATOR 2 <= (int2, int4),
    OPERATOR 3 = (int2, int4),
    OPERATOR 4 >= (int2, int4),
    OPERATOR 5 > (int2, int4);
ALTER OPERATOR FAMILY integer_ops USING gpu_learned ADD
    OPERATOR 1 < (int2, int8),
    OPERATOR 2 <= (int2, int8),
    OPERATOR 3 = (int2, int8),
    OPERATOR 4 >= (int2, int8),
    OPERATOR 5 > (int2, int8);
ALTER OPERATOR FAMILY integer_ops USING gpu_learned ADD
    OPERATOR 1 < (int4, int2),
    OPERATOR 2 <= (int4, int2),
    OPERATOR 3 = (int4, int2),
    OPERATOR 4 >= (int4, int2),
    OPERATOR 5 > (int4, int2);
ALTER OPERATOR FAMILY integer_ops USING gpu_learned ADD
    OPERATOR 1 < (int4, int8),
    OPERATOR 2 <= (int4, int8),
    OPERATOR 3 = (int4, int8),
    OPERATOR 4 >= (int4, int8),
    OPERATOR 5 > (int4, int8);
ALTER OPERATOR FAMILY integer_ops USING gpu_learned ADD
    OPERATOR 1 < (int8, int2),
    OPERATOR 2 <= (int8, int2),
    OPERATOR 3 = (int8, int2),
    OPERATOR 4 >= (int8, int2),
    OPERATOR 5 > (int8, int2);
ALTER OPERATOR FAMILY integer_ops USING gpu_learned ADD
    OPERATOR 1 < (int8, int4),
    OPERATOR 2 <= (int8, int4),
    OPERATOR 3 = (int8, int4),
    OPERATOR 4 >= (int8, int4),
    OPERATOR 5 > (int8, int4);

CREATE OPERATOR FAMILY float_ops USING gpu_learned;

CREATE OPERATOR CLASS float4_ops DEFAULT FOR TYPE float4 USING gpu_learned FAMILY float_ops AS
    OPERATOR 1 <,
    OPERATOR 2 <=,
    OPERATOR 3 =,
    OPERATOR 4 >=,
    OPERATOR 5 >;

CREATE OPERATOR CLASS float8_ops DEFAULT FOR TYPE float8 USING gpu_learned FAMILY float_ops AS
    OPERATOR 1 <,
    OPERATOR 2 <=,
    OPERATOR 3 =,
    OPERATOR 4 >=,
    OPERATOR 5 >;

ALTER OPERATOR FAMILY float_ops USING gpu_learned ADD
    OPERATOR 1 < (float4, float8),
    OPERATOR 2 <= (float4, float8),
    OPERATOR 3 = (float4, float8),
    OPERATOR 4 >= (float4, float8),
    OPERATOR 5 > (float4, float8);
ALTER OPERATOR FAMILY float_ops USING gpu_learned ADD
    OPERATOR 1 < (float8, float4),
    OPERATOR 2 <= (float8, float4),
    OPERATOR 3 = (float8, float4),
    OPERATOR 4 >= (float8, float4),
    OPERATOR 5 > (float8, float4);

CREATE OPERATOR FAMILY date_ops USING gpu_learned;

CREATE OPERATOR CLASS date_ops DEFAULT FOR TYPE date USING gpu_learned FAMILY date_ops AS
    OPERATOR 1 <,
    OPERATOR 2 <=,
    OPERATOR 3 =,
    OPERATOR 4 >=,
    OPERATOR 5 >;

CREATE OPERATOR FAMILY timestamp_ops USING gpu_learned;

CREATE OPERATOR CLASS timestamp_ops DEFAULT FOR TYPE timestamp USING gpu_learned FAMILY timestamp_ops AS
    OPERATOR 1 <,
    OPERATOR 2 <=,
    OPERATOR 3 =,
    OPERATOR 4 >=,
    OPERATOR 5 >;

CREATE OPERATOR FAMILY timestamptz_ops USING gpu_learned;

CREATE OPERATOR CLASS timestamptz_ops DEFAULT FOR TYPE timestamptz USING gpu_learned FAMILY timestamptz_ops AS
    OPERATOR 1 <,
    OPERATOR 2 <=,
    OPERATOR 3 =,
    OPERATOR 4 >=,
    OPERATOR 5 >;
