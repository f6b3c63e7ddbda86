-- gpu_spatial's operator class for point, with GiST's strategy numbers:
-- 28 point <@ box, 68 point <@ circle, 6 point ~= point, and 15
-- point <-> point for ORDER BY (results in exact distance order).

CREATE OPERATOR CLASS point_ops DEFAULT FOR TYPE point USING gpu_spatial AS
    OPERATOR 6 ~= (point, point),
    OPERATOR 28 <@ (point, box),
    OPERATOR 68 <@ (point, circle),
    OPERATOR 15 <-> (point, point) FOR ORDER BY float_ops;
