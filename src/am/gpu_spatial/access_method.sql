-- The gpu_spatial access method: its handler (emitted by index_am!) and
-- operator classes.

CREATE FUNCTION gpu_spatial_handler(internal) RETURNS index_am_handler
    PARALLEL SAFE IMMUTABLE STRICT LANGUAGE c
    AS 'MODULE_PATHNAME', 'gpu_spatial_handler_wrapper';
CREATE ACCESS METHOD gpu_spatial TYPE INDEX HANDLER gpu_spatial_handler;
COMMENT ON ACCESS METHOD gpu_spatial IS 'G-PICS quadtree over points: leaves as page runs, nodes mirrored on the GPU for batches';

-- gpu_spatial's operator class for point, with GiST's strategy numbers:
-- 28 point <@ box, 68 point <@ circle, 6 point ~= point, and 15
-- point <-> point for ORDER BY (results in exact distance order).

CREATE OPERATOR CLASS point_ops DEFAULT FOR TYPE point USING gpu_spatial AS
    OPERATOR 6 ~= (point, point),
    OPERATOR 28 <@ (point, box),
    OPERATOR 68 <@ (point, circle),
    OPERATOR 15 <-> (point, point) FOR ORDER BY float_ops;
