package io.tidemark.spark;

import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.Map;
import java.util.WeakHashMap;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * Protobuf record values decoded in the JVM ({@code value_format: protobuf}): a Spark UDF of the value and the
 * batch's frozen schemas (a JSON literal, as bytes), giving per record {@code {row, error}}: the reader message's
 * fields, or why the record is bad. Registered per batch by {@code tidemark.batch.spark.protobuf_jvm} with the
 * reader's struct as its return type.
 *
 * <p>The frozen schemas arrive as a binary literal: Spark hands the UDF the literal's one array for every row of a
 * task, so the decoder built for it is found by identity, without reading the (kilobytes of) JSON again.
 */
public final class ProtobufDecode implements UDF2<byte[], byte[], Row> {
    private static final long serialVersionUID = 1L;
    private static final Map<byte[], ProtobufDecoder> DECODERS = Collections.synchronizedMap(new WeakHashMap<>());
    private static final ThreadLocal<Object[]> LAST = new ThreadLocal<>();

    @Override
    public Row call(byte[] value, byte[] frozen) {
        ProtobufDecoder decoder = decoder(frozen);
        try {
            return RowFactory.create(decoder.decode(value), null);
        } catch (BadRecord bad) {
            return RowFactory.create(null, bad.getMessage());
        }
    }

    private static ProtobufDecoder decoder(byte[] frozen) {
        Object[] last = LAST.get();
        if (last != null && last[0] == frozen) {
            return (ProtobufDecoder) last[1];
        }
        ProtobufDecoder decoder = DECODERS.computeIfAbsent(frozen,
                f -> new ProtobufDecoder(new String(f, StandardCharsets.UTF_8)));
        LAST.set(new Object[] {frozen, decoder});
        return decoder;
    }
}
