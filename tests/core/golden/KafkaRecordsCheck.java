// Cross-checks aioaccum's record batches against the Java client's own reader and builder.
//
//   java KafkaRecordsCheck read FILE...          validate CRCs and dump every record of every batch
//   java KafkaRecordsCheck build CODEC IN OUT    build one batch from a record list, write its bytes
//
// Record lists and dumps use one line per record, fields separated by spaces, bytes in hex,
// "-" for null, "." for empty: TIMESTAMP KEY VALUE [HEADER_KEY HEADER_VALUE]...

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.DefaultRecordBatch;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MemoryRecordsBuilder;
import org.apache.kafka.common.record.internal.MutableRecordBatch;
import org.apache.kafka.common.record.internal.Record;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

public final class KafkaRecordsCheck {
    private static final HexFormat HEX = HexFormat.of();

    public static void main(String[] args) throws Exception {
        if (args[0].equals("read")) {
            for (int i = 1; i < args.length; i++) {
                read(Files.readAllBytes(Paths.get(args[i])));
            }
        } else if (args[0].equals("build")) {
            build(args[1], Files.readAllLines(Paths.get(args[2])), args[3]);
        } else {
            throw new IllegalArgumentException(args[0]);
        }
    }

    private static String hex(ByteBuffer buf) {
        if (buf == null) return "-";
        if (!buf.hasRemaining()) return ".";
        byte[] bytes = new byte[buf.remaining()];
        buf.duplicate().get(bytes);
        return HEX.formatHex(bytes);
    }

    private static String hex(byte[] bytes) {
        if (bytes == null) return "-";
        if (bytes.length == 0) return ".";
        return HEX.formatHex(bytes);
    }

    private static byte[] unhex(String s) {
        if (s.equals("-")) return null;
        if (s.equals(".")) return new byte[0];
        return HEX.parseHex(s);
    }

    private static void read(byte[] bytes) {
        MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(bytes));
        for (MutableRecordBatch batch : records.batches()) {
            batch.ensureValid();
            System.out.println("BATCH " + batch.magic() + " " + batch.compressionType().id + " "
                + batch.countOrNull() + " " + batch.lastOffset() + " "
                + ((DefaultRecordBatch) batch).baseTimestamp()
                + " " + batch.maxTimestamp() + " " + batch.producerId() + " " + batch.producerEpoch()
                + " " + batch.baseSequence() + " " + batch.isTransactional() + " "
                + batch.sizeInBytes());
            for (Record record : batch) {
                record.ensureValid();
                StringBuilder line = new StringBuilder("REC ");
                line.append(record.offset()).append(' ').append(record.timestamp()).append(' ');
                line.append(hex(record.key())).append(' ').append(hex(record.value()));
                for (Header header : record.headers()) {
                    line.append(' ').append(hex(header.key().getBytes(StandardCharsets.UTF_8)));
                    line.append(' ').append(hex(header.value()));
                }
                System.out.println(line);
            }
        }
    }

    private static void build(String codec, List<String> lines, String out) throws Exception {
        ByteBuffer buffer = ByteBuffer.allocate(1 << 22);
        MemoryRecordsBuilder builder = MemoryRecords.builder(
            buffer, Compression.of(codec).build(), TimestampType.CREATE_TIME, 0L);
        for (String line : lines) {
            if (line.isBlank()) continue;
            String[] f = line.trim().split(" ");
            List<Header> headers = new ArrayList<>();
            for (int i = 3; i + 1 < f.length; i += 2) {
                headers.add(new RecordHeader(new String(unhex(f[i]), StandardCharsets.UTF_8), unhex(f[i + 1])));
            }
            builder.append(Long.parseLong(f[0]), unhex(f[1]), unhex(f[2]), headers.toArray(new Header[0]));
        }
        ByteBuffer built = builder.build().buffer();
        byte[] bytes = new byte[built.remaining()];
        built.get(bytes);
        Files.write(Paths.get(out), bytes);
    }
}
