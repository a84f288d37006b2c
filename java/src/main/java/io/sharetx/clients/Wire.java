package io.sharetx.clients;

import org.apache.kafka.common.Uuid;

import java.io.ByteArrayOutputStream;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

/** The Kafka protocol's primitive types, classic and flexible (KIP-482), for the few messages the library sends itself. */
final class Wire {
    private Wire() {
    }

    /** A growing big-endian buffer. */
    static final class Writer {
        private final ByteArrayOutputStream out = new ByteArrayOutputStream(128);

        Writer int8(int v) {
            out.write(v);
            return this;
        }

        Writer int16(int v) {
            out.write(v >>> 8);
            out.write(v);
            return this;
        }

        Writer int32(int v) {
            int16(v >>> 16);
            return int16(v);
        }

        Writer int64(long v) {
            int32((int) (v >>> 32));
            return int32((int) v);
        }

        Writer bool(boolean v) {
            return int8(v ? 1 : 0);
        }

        Writer uvarint(long v) {
            while ((v & ~0x7FL) != 0) {
                out.write((int) ((v & 0x7F) | 0x80));
                v >>>= 7;
            }
            out.write((int) v);
            return this;
        }

        Writer uuid(Uuid id) {
            int64(id.getMostSignificantBits());
            return int64(id.getLeastSignificantBits());
        }

        Writer raw(byte[] b) {
            out.write(b, 0, b.length);
            return this;
        }

        /** INT16-length STRING, or -1 for null (classic encoding). */
        Writer string(String s) {
            if (s == null) {
                return int16(-1);
            }
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            int16(b.length);
            return raw(b);
        }

        /** INT32-length BYTES (classic encoding). */
        Writer bytes(byte[] b) {
            int32(b.length);
            return raw(b);
        }

        /** COMPACT_(NULLABLE_)STRING: uvarint length + 1, 0 for null. */
        Writer compactString(String s) {
            if (s == null) {
                return uvarint(0);
            }
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            uvarint(b.length + 1L);
            return raw(b);
        }

        Writer compactArrayLen(int n) {
            return uvarint(n + 1L);
        }

        /** An empty tagged-field section. */
        Writer noTags() {
            return uvarint(0);
        }

        byte[] toByteArray() {
            return out.toByteArray();
        }
    }

    /** Reads a response; any short read is a {@link Malformed}. */
    static final class Reader {
        private final ByteBuffer b;

        Reader(ByteBuffer b) {
            this.b = b;
        }

        int int8() {
            return get(() -> b.get());
        }

        short int16() {
            return get(() -> b.getShort());
        }

        int int32() {
            return get(() -> b.getInt());
        }

        long int64() {
            return get(() -> b.getLong());
        }

        boolean bool() {
            return int8() != 0;
        }

        long uvarint() {
            long v = 0;
            for (int shift = 0; shift < 35; shift += 7) {
                int x = int8() & 0xFF;
                v |= (long) (x & 0x7F) << shift;
                if ((x & 0x80) == 0) {
                    return v;
                }
            }
            throw new Malformed("varint too long");
        }

        Uuid uuid() {
            long hi = int64();
            return new Uuid(hi, int64());
        }

        byte[] raw(int n) {
            if (n < 0 || n > b.remaining()) {
                throw new Malformed("length " + n + " past the end of the message");
            }
            byte[] out = new byte[n];
            b.get(out);
            return out;
        }

        String string() {
            int n = int16();
            return n < 0 ? null : new String(raw(n), StandardCharsets.UTF_8);
        }

        byte[] bytes() {
            int n = int32();
            return n < 0 ? null : raw(n);
        }

        String compactString() {
            long n = uvarint();
            return n == 0 ? null : new String(raw((int) (n - 1)), StandardCharsets.UTF_8);
        }

        /** A compact array's length; -1 for null. */
        int compactArrayLen() {
            long n = uvarint() - 1;
            if (n > b.remaining()) {
                throw new Malformed("array length " + n + " past the end of the message");
            }
            return (int) n;
        }

        void skipTags() {
            long n = uvarint();
            for (long i = 0; i < n; i++) {
                uvarint(); // tag
                raw((int) uvarint());
            }
        }

        int remaining() {
            return b.remaining();
        }

        private interface Get<T> {
            T get();
        }

        private static <T> T get(Get<T> g) {
            try {
                return g.get();
            } catch (BufferUnderflowException e) {
                throw new Malformed("message ends early");
            }
        }
    }

    /** A response that does not decode. */
    static final class Malformed extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Malformed(String msg) {
            super(msg);
        }
    }
}
