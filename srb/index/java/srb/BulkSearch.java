package srb;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Anserini's SimpleSearcher.search(q, k) up to its reranking, for a batch of queries on a pool of
 * Java threads, every hit returned as [id, score] in one JSON string (srb/index/lucene.py).
 *
 * <p>Per query: BagOfWordsQueryGenerator.buildQuery(field, analyzer, text), then
 * IndexSearcher.search(query, k, sort, true) with SimpleSearcher's sort (score, then the "id" doc
 * value); the id is that sort's own BytesRef value and the score is Float.toString text, read
 * back to the exact float. Lucene and Anserini are reached by reflection only, so this class
 * compiles with any JDK 17+ and no jar on the classpath (Anserini's classes are Java 21).
 *
 * <p>{@link #searchPruned} returns the same hits faster: Lucene's score-only top-n collector may
 * skip documents that cannot enter the top n (block-max WAND), which the score-then-id sort
 * cannot. It collects k + {@link #MARGIN} hits and breaks score ties by the "id" doc value itself;
 * that is exact whenever the k-th score is above the last collected one (every document tied
 * with the k-th is then among them), and otherwise the query is searched the sorted way.
 */
public final class BulkSearch {
  private BulkSearch() {}

  /** Hits collected beyond k, so that ties at the k-th score are seen whole. */
  public static final int MARGIN = 10;

  private static final AtomicLong FALLBACKS = new AtomicLong();
  private static final Map<Object, byte[][]> IDS = new WeakHashMap<>();

  /** Queries {@link #searchPruned} searched the sorted way (a tie reached past the margin). */
  public static long fallbacks() {
    return FALLBACKS.get();
  }

  /**
   * Every document's "id" doc value (binary: what the sort's string_val "id" compares, byte by
   * byte, unsigned), by Lucene doc number; read once per index reader.
   */
  private static byte[][] ids(Object searcher, ClassLoader loader) throws Exception {
    Object reader = searcher.getClass().getMethod("getIndexReader").invoke(searcher);
    synchronized (IDS) {
      byte[][] known = IDS.get(reader);
      if (known != null) {
        return known;
      }
      int maxDoc = (int) reader.getClass().getMethod("maxDoc").invoke(reader);
      byte[][] out = new byte[maxDoc][];
      Class<?> context = Class.forName("org.apache.lucene.index.LeafReaderContext", false, loader);
      Method leafReader = context.getMethod("reader");
      Field docBase = context.getField("docBase");
      Class<?> leafClass = Class.forName("org.apache.lucene.index.LeafReader", false, loader);
      Method binary = leafClass.getMethod("getBinaryDocValues", String.class);
      Method leafMax = leafClass.getMethod("maxDoc");
      Class<?> bdv = Class.forName("org.apache.lucene.index.BinaryDocValues", false, loader);
      Method advance = bdv.getMethod("advanceExact", int.class);
      advance.setAccessible(true); // declared in package-private DocValuesIterator
      Method value = bdv.getMethod("binaryValue");
      Class<?> bytesRef = Class.forName("org.apache.lucene.util.BytesRef", false, loader);
      Field bytes = bytesRef.getField("bytes");
      Field offset = bytesRef.getField("offset");
      Field length = bytesRef.getField("length");
      for (Object leaf : (List<?>) reader.getClass().getMethod("leaves").invoke(reader)) {
        Object leafReaderObj = leafReader.invoke(leaf);
        int base = docBase.getInt(leaf);
        Object values = binary.invoke(leafReaderObj, "id");
        if (values == null) {
          throw new IllegalStateException("the index has no \"id\" binary doc values");
        }
        int docs = (int) leafMax.invoke(leafReaderObj);
        for (int doc = 0; doc < docs; doc++) {
          if ((boolean) advance.invoke(values, doc)) {
            Object ref = value.invoke(values);
            int off = offset.getInt(ref);
            out[base + doc] =
                Arrays.copyOfRange((byte[]) bytes.get(ref), off, off + length.getInt(ref));
          }
        }
      }
      IDS.put(reader, out);
      return out;
    }
  }

  /** Like {@link #search}, with the same hits; see the class comment for how. */
  public static String searchPruned(
      Object searcher,
      Object generator,
      Object analyzer,
      Object sort,
      String field,
      String[] queries,
      int k,
      int threads)
      throws Exception {
    Lucene lucene = new Lucene(searcher, generator);
    Method build = lucene.build;
    Field scoreDocs = lucene.scoreDocs;
    Field score = lucene.score;
    Class<?> collectorClass = lucene.type("org.apache.lucene.search.Collector");
    Method create =
        lucene
            .type("org.apache.lucene.search.TopScoreDocCollector")
            .getMethod("create", int.class, int.class);
    Method collect = searcher.getClass().getMethod("search", lucene.query, collectorClass);
    Field docField = lucene.type("org.apache.lucene.search.ScoreDoc").getField("doc");
    byte[][] ids = ids(searcher, lucene.loader);
    int n = k + MARGIN;
    Method topDocsMethod =
        lucene.type("org.apache.lucene.search.TopDocsCollector").getMethod("topDocs");

    return batch(
        queries,
        threads,
        text -> {
          Object query = build.invoke(generator, field, analyzer, text);
          Object collector = create.invoke(null, n, n);
          collect.invoke(searcher, query, collector);
          Object[] hits = (Object[]) scoreDocs.get(topDocsMethod.invoke(collector));
          int m = hits.length;
          if (m >= n && !(score.getFloat(hits[k - 1]) > score.getFloat(hits[m - 1]))) {
            FALLBACKS.incrementAndGet();
            String[] one = {text};
            String sortedRun = search(searcher, generator, analyzer, sort, field, one, k, 1);
            return sortedRun.substring(1, sortedRun.length() - 1);
          }
          int[] docs = new int[m];
          float[] scores = new float[m];
          Integer[] order = new Integer[m];
          for (int i = 0; i < m; i++) {
            docs[i] = docField.getInt(hits[i]);
            scores[i] = score.getFloat(hits[i]);
            order[i] = i;
          }
          Arrays.sort(
              order,
              (a, b) -> {
                int byScore = Float.compare(scores[b], scores[a]);
                return byScore != 0
                    ? byScore
                    : Arrays.compareUnsigned(ids[docs[a]], ids[docs[b]]);
              });
          int keep = Math.min(k, m);
          StringBuilder out = new StringBuilder(keep * 32 + 2).append('[');
          for (int i = 0; i < keep; i++) {
            int hit = order[i];
            if (i > 0) out.append(',');
            out.append('[');
            quote(out, new String(ids[docs[hit]], StandardCharsets.UTF_8));
            out.append(',').append(Float.toString(scores[hit])).append(']');
          }
          return out.append(']').toString();
        });
  }

  /** JSON array, one element per query in order: [[id, score], ...], or a string (the error). */
  public static String search(
      Object searcher,
      Object generator,
      Object analyzer,
      Object sort,
      String field,
      String[] queries,
      int k,
      int threads)
      throws Exception {
    Lucene lucene = new Lucene(searcher, generator);
    Method build = lucene.build;
    Field scoreDocs = lucene.scoreDocs;
    Field score = lucene.score;
    Class<?> sortClass = lucene.type("org.apache.lucene.search.Sort");
    Method run =
        searcher.getClass().getMethod("search", lucene.query, int.class, sortClass, boolean.class);
    Field sortValues = lucene.type("org.apache.lucene.search.FieldDoc").getField("fields");
    Class<?> bytesRef = lucene.type("org.apache.lucene.util.BytesRef");
    Field bytes = bytesRef.getField("bytes");
    Field offset = bytesRef.getField("offset");
    Field length = bytesRef.getField("length");

    return batch(
        queries,
        threads,
        text -> {
          Object query = build.invoke(generator, field, analyzer, text);
          Object top = run.invoke(searcher, query, k, sort, true);
          Object[] hits = (Object[]) scoreDocs.get(top);
          StringBuilder out = new StringBuilder(hits.length * 32 + 2).append('[');
          for (int i = 0; i < hits.length; i++) {
            Object id = ((Object[]) sortValues.get(hits[i]))[1];
            String name =
                new String(
                    (byte[]) bytes.get(id),
                    offset.getInt(id),
                    length.getInt(id),
                    StandardCharsets.UTF_8);
            if (i > 0) out.append(',');
            out.append('[');
            quote(out, name);
            out.append(',').append(Float.toString(score.getFloat(hits[i]))).append(']');
          }
          return out.append(']').toString();
        });
  }

  /**
   * What both searches reach by reflection: Lucene's classes as the searcher's loader has them,
   * Anserini's query builder, and the hits of a TopDocs.
   */
  private static final class Lucene {
    final ClassLoader loader;
    final Class<?> query;
    final Method build;
    final Field scoreDocs;
    final Field score;

    Lucene(Object searcher, Object generator) throws Exception {
      loader = searcher.getClass().getClassLoader();
      query = type("org.apache.lucene.search.Query");
      Class<?> analyzer = type("org.apache.lucene.analysis.Analyzer");
      build = generator.getClass().getMethod("buildQuery", String.class, analyzer, String.class);
      scoreDocs = type("org.apache.lucene.search.TopDocs").getField("scoreDocs");
      score = type("org.apache.lucene.search.ScoreDoc").getField("score");
    }

    Class<?> type(String name) throws ClassNotFoundException {
      return Class.forName(name, false, loader);
    }
  }

  /** One query's search: its JSON element. */
  private interface QuerySearch {
    String run(String text) throws Exception;
  }

  /**
   * Every query searched on a pool of `threads` Java threads: a JSON array in query order, where
   * a query whose Lucene call threw is the message it threw.
   */
  private static String batch(String[] queries, int threads, QuerySearch search) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, threads));
    try {
      List<Future<String>> runs = new ArrayList<>(queries.length);
      for (String text : queries) {
        runs.add(
            pool.submit(
                () -> {
                  try {
                    return search.run(text);
                  } catch (InvocationTargetException e) {
                    Throwable cause = e.getCause() == null ? e : e.getCause();
                    StringBuilder out = new StringBuilder();
                    quote(out, cause.getClass().getName() + ": " + cause.getMessage());
                    return out.toString();
                  }
                }));
      }
      StringBuilder all = new StringBuilder().append('[');
      for (int i = 0; i < runs.size(); i++) {
        if (i > 0) all.append(',');
        all.append(runs.get(i).get());
      }
      return all.append(']').toString();
    } finally {
      pool.shutdownNow();
    }
  }

  private static void quote(StringBuilder out, String text) {
    out.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    out.append('"');
  }
}
