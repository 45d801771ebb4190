# cython: language_level=3
"""CRC-32C (Castagnoli), the checksum of Kafka's record batches and of journal entries, as C
included in each module that cimports it: the compiled record builder (``_crecords.pyx``)
and the journal's entry writer (``_journal/_cwriter.pyx``). It uses the SSE 4.2 instruction
where the CPU has it, three streams at a time over long inputs, and eight-table lookups
elsewhere. A module that cimports it calls ``aioaccum_crc_init()`` once when it loads.

``aioaccum_crc32c(crc, p, n)`` continues from ``crc`` (0 to start), as ``crc32c.crc32c``
does, so a stream laid over several buffers is one call per buffer.
"""

from libc.stdint cimport uint32_t

cdef extern from *:
    """
    #include <stdint.h>
    #include <stddef.h>
    static uint32_t aioaccum_crc_table[8][256];
    static int aioaccum_crc_hw = 0;

    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static void aioaccum_crc_zeros_init(void);
    #endif

    static void aioaccum_crc_init(void) {
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = n;
            for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            aioaccum_crc_table[0][n] = c;
        }
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = aioaccum_crc_table[0][n];
            for (int k = 1; k < 8; k++) {
                c = aioaccum_crc_table[0][c & 0xFF] ^ (c >> 8);
                aioaccum_crc_table[k][n] = c;
            }
        }
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        __builtin_cpu_init();
        aioaccum_crc_hw = __builtin_cpu_supports("sse4.2");
        aioaccum_crc_zeros_init();
    #endif
    }

    static uint32_t aioaccum_crc_sw(uint32_t crc, const unsigned char *p, size_t n) {
        crc = ~crc;
        while (n >= 8) {
            uint64_t w;
            __builtin_memcpy(&w, p, 8);  /* little-endian x86/arm64 */
            uint32_t lo = (uint32_t)w ^ crc, hi = (uint32_t)(w >> 32);
            crc = aioaccum_crc_table[7][lo & 0xFF] ^ aioaccum_crc_table[6][(lo >> 8) & 0xFF]
                ^ aioaccum_crc_table[5][(lo >> 16) & 0xFF] ^ aioaccum_crc_table[4][lo >> 24]
                ^ aioaccum_crc_table[3][hi & 0xFF] ^ aioaccum_crc_table[2][(hi >> 8) & 0xFF]
                ^ aioaccum_crc_table[1][(hi >> 16) & 0xFF] ^ aioaccum_crc_table[0][hi >> 24];
            p += 8; n -= 8;
        }
        while (n--) crc = aioaccum_crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        return ~crc;
    }

    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    /* The crc32 instruction takes 3 cycles and depends on the one before: one stream of
       8-byte words runs at a third of the unit's speed. So blocks of 3 x STRIDE bytes run as
       three independent streams, and the three results are joined with the "STRIDE zero
       bytes" operator (a CRC register is linear in its input: the register after A then B is
       the register after A advanced over len(B) zeros, xor the register of B from 0). */
    #define AIOACCUM_STRIDE 256
    static uint32_t aioaccum_crc_zeros[4][256];  /* a register advanced over STRIDE zeros */

    static uint32_t aioaccum_crc_advance(uint32_t c, size_t zeros) {
        while (zeros--) c = aioaccum_crc_table[0][c & 0xFF] ^ (c >> 8);
        return c;
    }

    static void aioaccum_crc_zeros_init(void) {
        for (int k = 0; k < 4; k++)
            for (uint32_t v = 0; v < 256; v++)
                aioaccum_crc_zeros[k][v] = aioaccum_crc_advance(v << (8 * k), AIOACCUM_STRIDE);
    }

    static inline uint32_t aioaccum_crc_shift(uint32_t c) {
        return aioaccum_crc_zeros[0][c & 0xFF] ^ aioaccum_crc_zeros[1][(c >> 8) & 0xFF]
            ^ aioaccum_crc_zeros[2][(c >> 16) & 0xFF] ^ aioaccum_crc_zeros[3][c >> 24];
    }

    __attribute__((target("sse4.2")))
    static uint32_t aioaccum_crc_hw32(uint32_t crc, const unsigned char *p, size_t n) {
        uint64_t c = ~crc;
        while (n >= 3 * AIOACCUM_STRIDE) {
            uint64_t c1 = 0, c2 = 0, w0, w1, w2;
            for (int i = 0; i < AIOACCUM_STRIDE; i += 8) {
                __builtin_memcpy(&w0, p + i, 8);
                __builtin_memcpy(&w1, p + AIOACCUM_STRIDE + i, 8);
                __builtin_memcpy(&w2, p + 2 * AIOACCUM_STRIDE + i, 8);
                c = __builtin_ia32_crc32di(c, w0);
                c1 = __builtin_ia32_crc32di(c1, w1);
                c2 = __builtin_ia32_crc32di(c2, w2);
            }
            c = aioaccum_crc_shift((uint32_t)c) ^ (uint32_t)c1;
            c = aioaccum_crc_shift((uint32_t)c) ^ (uint32_t)c2;
            p += 3 * AIOACCUM_STRIDE; n -= 3 * AIOACCUM_STRIDE;
        }
        while (n >= 8) {
            uint64_t w;
            __builtin_memcpy(&w, p, 8);
            c = __builtin_ia32_crc32di(c, w);
            p += 8; n -= 8;
        }
        uint32_t c32 = (uint32_t)c;
        while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
        return ~c32;
    }
    #endif

    static uint32_t aioaccum_crc32c(uint32_t crc, const unsigned char *p, size_t n) {
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (aioaccum_crc_hw) return aioaccum_crc_hw32(crc, p, n);
    #endif
        return aioaccum_crc_sw(crc, p, n);
    }
    """
    void aioaccum_crc_init() nogil
    uint32_t aioaccum_crc32c(uint32_t crc, const unsigned char* p, size_t n) nogil
