/**
 * The schema card of a scope: the relations and columns analytic chat may query, as the language
 * model sees them. The guards (guards.ts) hold every generated SELECT to it: a relation or column
 * that is not on the card is refused, and a column that declares `values` refuses any other literal.
 */

export interface CardColumn {
  name: string;
  type: string;
  label?: string;
  description?: string;
  examples?: string[];
  /** The declared value domain: a literal compared with this column must be one of these (case-sensitive, as stored). */
  values?: string[];
}

export interface CardRelation {
  /**
   * Schema-qualified, as the model writes it (`ext.partners`); `resolveRelation` maps it to the
   * tenant's real table. An entity's relation is `entity.<name>`.
   */
  name: string;
  /** Set for an entity's relation: the entity's name; its rows are computed when a query runs (src/entities/relation.ts). */
  entity?: string;
  columns: CardColumn[];
}

export interface SchemaCard {
  scope: string;
  relations: CardRelation[];
}
