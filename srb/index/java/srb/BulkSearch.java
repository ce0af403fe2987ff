package srb;

import java.lang.reflect.Field;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * Anserini's SimpleSearcher.search(q, k) up to its reranking, for a batch of queries on a pool of
 * Java threads, every hit returned as [id, score] in one JSON string (srb/index/lucene.py).
 *
 * <p>Per query: BagOfWordsQueryGenerator.buildQuery(field, analyzer, text), then
 * IndexSearcher.search(query, k, sort, true) with SimpleSearcher's sort (score, then the "id" doc
 * value); the id is that sort's own BytesRef value and the score is Float.toString text, read
 * back to the exact float. Lucene and Anserini are reached by reflection only, so this class
 * compiles with any JDK 17+ and no jar on the classpath (Anserini's classes are Java 21).
 */
public final class BulkSearch {
  private BulkSearch() {}

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
    ClassLoader loader = searcher.getClass().getClassLoader();
    Class<?> analyzerClass = Class.forName("org.apache.lucene.analysis.Analyzer", false, loader);
    Class<?> queryClass = Class.forName("org.apache.lucene.search.Query", false, loader);
    Class<?> sortClass = Class.forName("org.apache.lucene.search.Sort", false, loader);
    Method build =
        generator.getClass().getMethod("buildQuery", String.class, analyzerClass, String.class);
    Method run =
        searcher.getClass().getMethod("search", queryClass, int.class, sortClass, boolean.class);
    Class<?> topDocs = Class.forName("org.apache.lucene.search.TopDocs", false, loader);
    Field scoreDocs = topDocs.getField("scoreDocs");
    Class<?> scoreDoc = Class.forName("org.apache.lucene.search.ScoreDoc", false, loader);
    Field score = scoreDoc.getField("score");
    Field sortValues =
        Class.forName("org.apache.lucene.search.FieldDoc", false, loader).getField("fields");
    Class<?> bytesRef = Class.forName("org.apache.lucene.util.BytesRef", false, loader);
    Field bytes = bytesRef.getField("bytes");
    Field offset = bytesRef.getField("offset");
    Field length = bytesRef.getField("length");

    ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, threads));
    try {
      List<Future<String>> runs = new ArrayList<>(queries.length);
      for (String text : queries) {
        runs.add(
            pool.submit(
                () -> {
                  try {
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
